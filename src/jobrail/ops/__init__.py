"""What operators see and do: the admin API, the console, dead letters, redrives, limits."""
