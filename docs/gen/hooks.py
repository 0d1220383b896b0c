"""The MkDocs hook (``hooks:`` in mkdocs.yml) that generates the reference pages: each
marker ``<!-- generated: NAME -->`` in a page is replaced by what ``pages`` makes of the
code, at every build. A page with a marker no generator knows stops the build."""

import re
import sys
from pathlib import Path
from typing import Any

MARKER = re.compile(r"<!-- generated: [a-z-]+ -->")


def on_config(config: Any) -> Any:
    # The generators import docs.gen, jobrail's reference application (contexts,
    # workers) and jobrail: all found from the repository's root, where mkdocs.yml is.
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    from docs.gen.pages import GENERATED

    def generated(marker: re.Match[str]) -> str:
        make = GENERATED.get(marker.group(0))
        if make is None:
            raise ValueError(f"{page.file.src_uri}: no generator for {marker.group(0)}")
        return make()

    return MARKER.sub(generated, markdown)
