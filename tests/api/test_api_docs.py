"""``/docs`` is served from files the API itself serves: no CDN, so an air-gapped site sees it (issue 15)."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import pytest

ANY_URL = re.compile(r"https?://[^\s\"'<>)]+")
REFERENCES = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")
CSS_URLS = re.compile(r"""url\(\s*["']?([^"')]+)""")
#: Hosts a Swagger UI page is commonly loaded from; none may appear in what /docs loads.
CDNS = ("cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com", "fonts.googleapis.com", "fonts.gstatic.com",
        "cdn.redoc.ly", "fastapi.tiangolo.com")


@pytest.mark.slow
def test_docs_page_and_every_asset_it_references_come_from_the_api(server):
    with server.client(token=None) as api:
        page = api.get("/docs")
        assert page.status_code == 200 and "SwaggerUIBundle" in page.text
        own = urlsplit(server.url).netloc
        assert [u for u in ANY_URL.findall(page.text) if urlsplit(u).netloc != own] == []
        assert '"validatorUrl": null' in page.text  # Swagger UI would otherwise send the schema to swagger.io
        assets = REFERENCES.findall(page.text)
        assert any(a.endswith(".js") for a in assets) and any(a.endswith(".css") for a in assets), assets
        for asset in assets:
            url = urljoin(server.url + "/docs", asset)
            assert urlsplit(url).netloc == own, asset
            answer = api.get(url)
            assert answer.status_code == 200 and answer.content, asset
            text = answer.content.decode("utf-8", "replace")
            for cdn in CDNS:
                assert cdn not in text, f"{asset} names {cdn}"
            if asset.endswith(".css"):  # everything a style sheet loads is inline (data:) or the API's own
                for target in CSS_URLS.findall(text):
                    assert target.startswith("data:") or urlsplit(urljoin(url, target)).netloc == own, target
                assert "@import" not in text
        assert api.get("/openapi.json").status_code == 200  # what the page loads next
        assert api.get("/redoc").status_code == 404  # ReDoc's bundle would fetch its logo from a CDN
