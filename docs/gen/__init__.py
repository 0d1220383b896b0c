"""The generators of the documentation site's reference pages (docs/reference/): the
settings, the HTTP API and the command line, made from the code at each build so that
they cannot fall behind it.

``sources`` holds every import of jobrail and of the reference application that they
use; the renderers (``settings_reference``, ``openapi_reference``, ``cli_reference``)
import nothing of jobrail and take what they render as arguments; ``pages`` puts the two
together, and ``hooks`` is the MkDocs hook that puts each page's text in place of its
marker (``<!-- generated: NAME -->``).
"""
