"""The layout a file actually has, and what the files below a directory put on each OST.

iez places files (placement library) but must also check what happened: on
Lustre the layout comes from the file system itself; elsewhere the placement
library emulates it with an extended attribute or a sidecar log, so the same
commands work on a laptop and in CI.

- :mod:`iez.layout.model`: a layout's JSON read back (the :class:`Layout` value both sources produce is
  :class:`iez.model.Layout`, the one layout type, re-exported there);
- :mod:`iez.layout.emulated`: the ``user.iez.layout`` attribute and the sidecar log;
- :mod:`iez.layout.lustre`: Lustre detection, layouts read from ``lustre.lov`` (composite too), defaults set;
- :mod:`iez.layout.rules`: what Lustre accepts as a layout, and layouts from the tools' JSON;
- :mod:`iez.layout.read`: one file's layout, whichever source holds it;
- :mod:`iez.layout.usage`: bytes per OST below a directory, and their OSTCost.
"""

from iez.layout.model import Layout
from iez.layout.read import LayoutReader, layout_of

__all__ = ["Layout", "LayoutReader", "layout_of"]
