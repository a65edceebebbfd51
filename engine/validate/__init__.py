"""The one gate every file the app reads and every server reply passes through. No Qt, no torch.

Hostile until validated: a reader first bounds the raw size (``limits``), then the nesting
depth before a parser can recurse on it (``jsonio``, ``yamlguard``), then the shape and the
value ranges (pydantic models in ``autosave`` and ``served``; the lesson reader's own checks).
Every refusal is an ``InputError`` whose message names the file or field, what was expected
and the bound that was passed, in one sentence a user can act on.
"""

from __future__ import annotations

from engine.validate.core import InputError

__all__ = ["InputError"]
