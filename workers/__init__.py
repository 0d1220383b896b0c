"""Worker entry points: the Taskiq broker with every module's tasks registered."""
