"""Google's side of FCM on a local pytest-httpserver: a service account whose token endpoint
is that server, the JWT-bearer exchange checked as Google checks it, and FCM's error shape.

Shared by the adapter's tests and the pipeline's, which send through FCM end to end.
"""

from __future__ import annotations

import json
import threading
from collections import Counter

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.auth import jwt
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

PROJECT = "tidings-test"
SEND = f"/v1/projects/{PROJECT}/messages:send"
TOKEN = "ya29.local-test-token"


def service_account(key: rsa.RSAPrivateKey, httpserver: HTTPServer) -> dict:
    return {
        "type": "service_account",
        "project_id": PROJECT,
        "private_key_id": "key-1",
        "private_key": key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode(),
        "client_email": f"tidings@{PROJECT}.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": httpserver.url_for("/token"),
    }


def serve_tokens(key: rsa.RSAPrivateKey, httpserver: HTTPServer) -> list[dict]:
    """The token endpoint: checks the signed JWT assertion like Google's would, grants a token.
    Returns the claims of every assertion it was shown."""
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    claims: list[dict] = []

    def grant(request: Request) -> Response:
        assert request.form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
        # google-auth signs for Google's token endpoint whatever token_uri it posts to.
        audience = "https://oauth2.googleapis.com/token"
        claims.append(jwt.decode(request.form["assertion"], certs=public, audience=audience))
        body = {"access_token": TOKEN, "expires_in": 3600, "token_type": "Bearer"}
        return Response(json.dumps(body), 200, content_type="application/json")

    httpserver.expect_request("/token", method="POST").respond_with_handler(grant)
    return claims


def fcm_error(status: int, code: str, fcm_code: str | None = None) -> Response:
    details = [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": fcm_code}]
    body = {
        "error": {
            "code": status,
            "message": "details",
            "status": code,
            "details": details if fcm_code else [],
        }
    }
    return Response(json.dumps(body), status, content_type="application/json")


class FcmDevices:
    """FCM's send endpoint as the devices see it: every request counted by its token, a
    repeat counted like any other (never forgiven as a retry), and answers scripted per token
    (`answer`), each used once; a token with none left is sent (200 with a message name)."""

    def __init__(self, httpserver: HTTPServer):
        self.requests: Counter[str] = Counter()
        self.order: list[str] = []
        self._script: dict[str, list[Response]] = {}
        self._lock = threading.Lock()
        httpserver.expect_request(SEND, method="POST").respond_with_handler(self._send)

    def answer(self, token: str, *answers: Response) -> None:
        """The next answers for `token`, in order."""
        with self._lock:
            self._script.setdefault(token, []).extend(answers)

    def name(self, token: str, n: int) -> str:
        """The message name FCM gives the `n`th delivery (from 1) to `token`."""
        return f"projects/{PROJECT}/messages/{token}-{n}"

    def _send(self, request: Request) -> Response:
        token = request.get_json()["message"]["token"]
        with self._lock:
            self.requests[token] += 1
            self.order.append(token)
            scripted = self._script.get(token)
            if scripted:
                return scripted.pop(0)
            body = {"name": self.name(token, self.requests[token])}
        return Response(json.dumps(body), 200, content_type="application/json")
