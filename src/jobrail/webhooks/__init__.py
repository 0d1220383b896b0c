"""Webhooks: a tenant's job events POSTed to its URLs, signed, delivered as jobs.

A tenant registers a webhook (POST /webhooks: a URL, the events it wants, a secret);
the webhook relay (in each worker process, and in ``jobrail run``) turns each event it
wants into a ``webhooks.deliver`` job, in the transaction that moves the relay on, so
each delivery is made once and goes with the retries, rate limit, dead letters and
redrive of any job. See jobrail.webhooks.domain for the signature.
"""

from jobrail.modules import BackgroundLoop, Module
from jobrail.webhooks.api import router
from jobrail.webhooks.ioc import WebhooksProvider
from jobrail.webhooks.jobs import deliver
from jobrail.webhooks.persistence import WebhookRelay

module = Module(
    name="webhooks",
    jobs=[deliver],
    routers=[router],
    providers=[WebhooksProvider()],
    loops=[BackgroundLoop("webhook-relay", WebhookRelay, WebhookRelay.run_forever)],
)
