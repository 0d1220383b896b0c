"""The run of one delivery: admit, claim, attempt, record; its outcomes, its watchdog
and its middleware."""
