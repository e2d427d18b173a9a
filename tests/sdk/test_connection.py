"""The HTTP client of a plain-http server does not read the CA bundle
(``flotilla.sdk.connection.tls_settings``: docs/performance.md, CLI start-up), and nothing
changes for an ``https://`` server or behind a proxy."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

import flotilla
from flotilla.cli.client import default_client
from flotilla.sdk.connection import http_settings, tls_settings


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)


class Queues(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps([]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = HTTPServer(("127.0.0.1", 0), Queues)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_plain_http_server_gets_a_context_that_trusts_nothing() -> None:
    verify = tls_settings("http://127.0.0.1:8467")["verify"]
    assert isinstance(verify, ssl.SSLContext)
    assert verify.get_ca_certs() == []  # the CA bundle was not read
    assert verify.verify_mode == ssl.CERT_REQUIRED and verify.check_hostname  # fails closed
    assert http_settings("http://127.0.0.1:8467", "t", 5.0)["verify"] is not None


@pytest.mark.parametrize("server", ["https://flotilla.example", "HTTPS://flotilla.example"])
def test_an_https_server_keeps_httpx_verification(server: str) -> None:
    assert tls_settings(server) == {}
    assert "verify" not in http_settings(server, None, 5.0)


@pytest.mark.parametrize("name", ["HTTPS_PROXY", "http_proxy", "ALL_PROXY"])
def test_behind_a_proxy_httpx_verifies_as_before(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, "https://proxy.example:3128")
    assert tls_settings("http://127.0.0.1:8467") == {}


def test_no_proxy_alone_is_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "localhost")
    assert "verify" in tls_settings("http://127.0.0.1:8467")


def test_the_sdk_and_the_cli_still_talk_plain_http(server: str) -> None:
    with flotilla.Client(server) as client:
        assert client.queues() == []
    with default_client(server, None) as http:
        assert http.get("/v1/queues").json() == []
