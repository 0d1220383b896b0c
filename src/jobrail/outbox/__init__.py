"""Messages and events written with the change that makes them and published after its
commit; the inbox that deduplicates them."""
