"""The REST API (FastAPI): ``create_app(settings)`` builds it; ``iez api`` serves it with uvicorn."""

from iez.api.app import create_app

__all__ = ["create_app"]
