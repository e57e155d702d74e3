"""``interlock view``: a local web view of runs on their statechart, live while they train.

Needs the ``view`` extra (``pip install 'interlock[view]'``: starlette, uvicorn,
sse-starlette); the rest of interlock does not import this package.
"""

from interlock.view.app import ViewConfig, make_app
from interlock.view.listener import LiveView
from interlock.view.runs import ForbiddenPath, find_runs, safe_path
from interlock.view.server import ViewServer

__all__ = ["ForbiddenPath", "LiveView", "ViewConfig", "ViewServer", "find_runs", "make_app", "safe_path"]
