"""A host FastAPI app that runs its report rendering on jobrail, through its facade only."""
