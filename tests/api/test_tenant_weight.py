"""A tenant's weight under fair dispatch, set by an operator through the admin API."""

from tests.support.fixtures import ApiClient


async def test_an_operator_sets_and_resets_a_tenant_s_weight(api: ApiClient) -> None:
    admin = await api.auth("ops", admin=True)
    tenant = await api.auth("heavy")

    set_ = await api.put("/admin/tenants/heavy/weight", json={"weight": 3}, headers=admin)
    reset = await api.put("/admin/tenants/heavy/weight", json={"weight": None}, headers=admin)
    zero = await api.put("/admin/tenants/heavy/weight", json={"weight": 0}, headers=admin)
    huge = await api.put("/admin/tenants/heavy/weight", json={"weight": 1e9}, headers=admin)
    text = await api.put("/admin/tenants/heavy/weight", json={"weight": "3"}, headers=admin)
    missing = await api.put("/admin/tenants/heavy/weight", json={}, headers=admin)
    unknown = await api.put("/admin/tenants/nobody/weight", json={"weight": 2}, headers=admin)
    not_admin = await api.put("/admin/tenants/heavy/weight", json={"weight": 2}, headers=tenant)

    assert set_.status_code == 200, set_.text
    assert set_.json() == {"tenant_id": "heavy", "weight": 3.0}
    assert reset.json() == {"tenant_id": "heavy", "weight": None}
    for refused in (zero, huge, text, missing):
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "validation_error"
    assert unknown.status_code == 404
    assert not_admin.status_code == 403
