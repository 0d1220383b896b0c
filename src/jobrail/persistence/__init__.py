"""SQLAlchemy (asyncio) persistence: engine, tables, unit of work and the job store."""
