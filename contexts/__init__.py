"""The bounded contexts built on jobrail: billing, sync and notifications.

They never import each other. They talk through integration events (``shared``)
listed in the event catalog (``catalog``), or through jobs.
"""
