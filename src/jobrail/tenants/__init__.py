"""Tenants and their API keys: who may call the API, and for which tenant.

``domain`` holds the rules (names, key format, hashing), ``ports`` the directory a
backend implements (``jobrail.store.tenants``), ``use_cases`` what the CLI
and the API do with it. Keys are shown once, when created, and stored only as
SHA-256 digests.
"""
