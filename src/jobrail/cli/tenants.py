"""`jobrail tenants`: create tenants, issue and revoke their API keys, list them; each
action's answer is one JSON object, and a refusal of the tenants' rules one line."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

# Nothing of jobrail is imported here (see jobrail.cli).
if TYPE_CHECKING:
    from jobrail.settings import Settings


async def _tenants_command(settings: Settings, args: argparse.Namespace) -> dict[str, object]:
    from jobrail.kernel.clock import SystemClock
    from jobrail.kernel.errors import DomainError
    from jobrail.kernel.ids import TenantId
    from jobrail.store.engine import create_engine
    from jobrail.store.tenants import SqlaTenantDirectory
    from jobrail.tenants.use_cases import (
        CreateTenant,
        IssueApiKey,
        RevokeApiKey,
        SetQueuedCap,
        SetTenantWeight,
    )

    engine = create_engine(settings.database)
    directory = SqlaTenantDirectory(engine)
    clock = SystemClock()
    try:
        if args.action == "create":
            issued = await CreateTenant(directory, clock)(args.name, admin=args.admin)
        elif args.action == "add-key":
            issued = await IssueApiKey(directory, clock)(TenantId(args.name))
        elif args.action == "set-cap":
            tenant = await SetQueuedCap(directory)(TenantId(args.name), args.max_queued)
            return {"tenant_id": tenant.id, "max_queued": tenant.max_queued}
        elif args.action == "set-weight":
            tenant = await SetTenantWeight(directory)(TenantId(args.name), args.weight)
            return {"tenant_id": tenant.id, "weight": tenant.weight}
        elif args.action == "revoke-key":
            revoked = await RevokeApiKey(directory, clock)(args.key_id)
            return {
                "tenant_id": revoked.tenant_id,
                "key_id": str(revoked.id),
                "hint": revoked.hint,
                "revoked_at": revoked.revoked_at.isoformat() if revoked.revoked_at else None,
            }
        else:
            return {
                "tenants": [
                    {
                        "tenant_id": tenant.id,
                        "admin": tenant.admin,
                        "max_queued": tenant.max_queued,
                        "weight": tenant.weight,
                        "keys": [
                            {
                                "key_id": str(key.id),
                                "hint": key.hint,
                                "created_at": key.created_at.isoformat(),
                                "revoked": key.revoked_at is not None,
                            }
                            for key in await directory.list_keys(tenant.id)
                        ],
                    }
                    for tenant in await directory.list_tenants()
                ]
            }
    except DomainError as exc:
        print(f"jobrail: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        await engine.dispose()
    return {
        "tenant_id": issued.tenant_id,
        "api_key": issued.api_key,
        "key_id": str(issued.key_id),
        "admin": issued.admin,
    }
