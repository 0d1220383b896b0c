"""The host app: its own table, its own authentication, and a job type on jobrail.

``POST /reports/{report_id}/render`` marks the team's report as rendering and enqueues
``reports.render`` in the same transaction, in a session on jobrail's database
(``rail.session()``); ``GET /jobs/{id}`` (jobrail's routes, scoped by the host's own
team) says how the job went, and jobrail's own API (its keys, admin and ops console) is
mounted under ``/jobrail``. ``jobrail worker --app host_app.main:rail`` runs the job in
the stack mode; in the embedded mode this process runs it.
"""

from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException
from pydantic import BaseModel
from sqlalchemy import Column, DateTime, MetaData, String, Table, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from jobrail import JobContext, JobRail, Lock, TokenBucket

rail = JobRail()  # settings from JOBRAIL_* (embedded by default: SQLite, no services)

# -- the host's own schema (its Alembic chain is host_app/migrations) -------------------

metadata = MetaData()
reports = Table(
    "reports",
    metadata,
    Column("team", String(64), primary_key=True),
    Column("id", String(64), primary_key=True),
    Column("status", String(16), nullable=False),
    Column("job_id", String(36), nullable=False),
    Column("requested_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# -- the host's own authentication: a token per team ------------------------------------

TEAMS = {"acme-token": "acme", "globex-token": "globex"}


async def current_team(x_team_token: Annotated[str, Header()]) -> str:
    team = TEAMS.get(x_team_token)
    if team is None:
        raise HTTPException(status_code=401, detail="unknown team token")
    return team


Team = Annotated[str, Depends(current_team)]

# -- the job type -----------------------------------------------------------------------


class RenderReport(BaseModel):
    report_id: str


@rail.job(
    "reports.render",
    payload=RenderReport,
    limits=[TokenBucket("render", key="render:{tenant_id}", capacity=10, per_second=5)],
    lock=Lock(key="report:{tenant_id}:{report_id}", ttl_s=60),
    max_attempts=6,
)
async def render_report(payload: RenderReport, ctx: JobContext) -> dict[str, str]:
    return {"url": f"https://reports.example/{ctx.tenant_id}/{payload.report_id}.pdf"}


# -- the app ----------------------------------------------------------------------------

app = FastAPI(title="Reports", lifespan=rail.lifespan)
app.include_router(rail.router(tenant=current_team))  # GET /jobs/{id}, GET /jobs, cancel
# jobrail's own API, on its own API keys (`jobrail tenants create`): the ops console at
# /jobrail/ops, the admin routes. After the job types: it builds the rail's runtime.
app.mount("/jobrail", rail.app())


@app.post("/reports/{report_id}/render", status_code=202)
async def render(report_id: str, team: Team) -> dict[str, Any]:
    async with rail.session() as session, session.begin():
        result = await render_report.enqueue(
            RenderReport(report_id=report_id), tenant_id=team, session=session
        )
        await _mark_rendering(session, team, report_id, str(result.job.id))
    # The report's row and the job commit together; the job's message leaves after that.
    return {"report_id": report_id, "job_id": str(result.job.id)}


@app.get("/reports/{report_id}")
async def report(report_id: str, team: Team) -> dict[str, Any]:
    async with rail.session() as session:
        row = (
            await session.execute(
                reports.select().where(reports.c.team == team, reports.c.id == report_id)
            )
        ).first()
    if row is None:
        raise HTTPException(status_code=404, detail="no such report")
    return {"report_id": row.id, "status": row.status, "job_id": row.job_id}


async def _mark_rendering(session: AsyncSession, team: str, report_id: str, job_id: str) -> None:
    where = (reports.c.team == team) & (reports.c.id == report_id)
    values = {"status": "rendering", "job_id": job_id}
    if await session.scalar(select(reports.c.id).where(where)) is None:
        await session.execute(reports.insert().values(team=team, id=report_id, **values))
    else:
        await session.execute(reports.update().where(where).values(**values))
