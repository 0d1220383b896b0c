from dishka import AnyOf, Provider, Scope, provide

from contexts.billing.adapters.persistence import SqlaBillingUnitOfWork
from contexts.billing.application.month_end import (
    FinishMonthEndRun,
    GetMonthEndRun,
    IssueInvoiceForRun,
    StartMonthEndRun,
)
from contexts.billing.application.ports import BillingUnitOfWork
from contexts.billing.application.use_cases import (
    CreateInvoice,
    GetInvoice,
    IssueInvoice,
    ListInvoices,
    PayInvoice,
    StartAutoPay,
    VoidInvoice,
)
from jobrail.sql import UnitOfWorkFactory


class BillingProvider(Provider):
    scope = Scope.REQUEST

    @provide
    def unit_of_work(
        self, factory: UnitOfWorkFactory
    ) -> AnyOf[SqlaBillingUnitOfWork, BillingUnitOfWork]:
        return factory(SqlaBillingUnitOfWork)

    create = provide(CreateInvoice)
    issue = provide(IssueInvoice)
    pay = provide(PayInvoice)
    void = provide(VoidInvoice)
    get = provide(GetInvoice)
    list = provide(ListInvoices)
    auto_pay = provide(StartAutoPay)
    start_month_end = provide(StartMonthEndRun)
    issue_for_run = provide(IssueInvoiceForRun)
    finish_month_end = provide(FinishMonthEndRun)
    get_month_end = provide(GetMonthEndRun)
