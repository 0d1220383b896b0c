"""Public: the shared kernel, value types and base errors every context may use.

Its modules are jobrail's public surface as they are: ``ids`` (``TenantId``,
``JobId``, ``new_id``), ``errors`` (``DomainError`` and its kinds, ``TransientError``,
``ThrottledError``, ``PermanentError``), ``clock`` (``Clock``, ``SystemClock``),
``money`` (``Money``), ``events`` (``DomainEvent``, ``IntegrationEvent``,
``AggregateRoot``) and ``json_text``. They are plain Python: a context's domain may
import them and nothing else of jobrail.
"""
