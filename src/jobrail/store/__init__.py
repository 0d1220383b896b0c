"""The job store: its tables, its SQL (asyncpg's hot path and SQLAlchemy's), the engine
and the migrations."""
