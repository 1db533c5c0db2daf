"""Calls to the iez REST API from other nodes (a compute node's ``iez map fetch``, the learner the SPANK
plugin starts at a job's end): the base URL checked, the caller's credential taken from the environment for
each call (:func:`iez.api.auth.client_header`: a MUNGE credential is good for one request), and errors that
name the URL, the status and the API's reason (``URL: 404 Not Found: detail``: the plugin reads the status
from that text)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from iez.errors import InputError


class ApiError(InputError):
    """The API refused a call or could not be reached (the message says which, and why)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def base_url(url: str | None) -> str:
    """The API's base URL without a trailing slash; ValueError naming what is wrong."""
    if not url:
        raise ValueError("no API URL: give --api URL or set IEZ_API_URL")
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"--api {url!r} is not an http:// or https:// URL")
    return url.rstrip("/")


def call(base: str, method: str, path: str, body: object = None, timeout: float = 60.0) -> bytes:
    """``method`` ``base + path`` with ``body`` as JSON, as the user the environment authenticates; the
    answer's bytes."""
    from iez.api.auth import client_header

    url = base + path
    headers = client_header()
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers = {**headers, "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.read()
    except urllib.error.HTTPError as err:
        raise ApiError(refusal(url, err), err.code) from None
    except (urllib.error.URLError, OSError) as err:
        raise ApiError(f"cannot reach {base}: {getattr(err, 'reason', err)}") from None


def refusal(url: str, err: urllib.error.HTTPError) -> str:
    """``URL: STATUS REASON[: the API's detail]``."""
    try:
        detail = json.loads(err.read().decode("utf-8", "replace")).get("detail")
    except (ValueError, AttributeError):
        detail = None
    return f"{url}: {err.code} {err.reason}" + (f": {detail}" if detail else "")
