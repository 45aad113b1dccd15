"""The error hierarchy's mapping of hutchd's answers (no daemon needed)."""

from __future__ import annotations

import dataclasses

import hutch
from hutch.errors import error_for


def test_codes_map_to_classes_and_keep_their_fields() -> None:
    error = error_for(404, b'{"error": {"code": "file_not_found", "message": "no /x"}}', "r7")
    assert isinstance(error, hutch.FileNotFound) and isinstance(error, hutch.NotFound)
    assert (error.code, error.status, error.request_id, error.message) == (
        "file_not_found", 404, "r7", "no /x")
    assert str(error) == "no /x code=file_not_found status=404 request=r7"
    bake = error_for(422, b'{"error": {"code": "bake_failed", "message": "m", "log": "L"}}', None)
    assert isinstance(bake, hutch.BakeFailed) and bake.log == "L"


def test_unknown_codes_fall_back_on_the_status() -> None:
    assert type(error_for(409, b'{"error": {"code": "new_kind", "message": "m"}}', None)) \
        is hutch.Conflict
    assert type(error_for(400, b'{"error": {"code": "duplicate_key", "message": "m"}}', None)) \
        is hutch.BadRequest
    plain = error_for(502, b"<html>bad gateway</html>", None)
    assert isinstance(plain, hutch.ServerError) and plain.code is None
    assert plain.message == "<html>bad gateway</html>"
    assert error_for(418, b"", None).message == "HTTP 418"


def test_deepagents_backend_imports_without_deepagents() -> None:
    from hutch import deepagents

    fields = {f.name for f in dataclasses.fields(deepagents.ReadResult)}
    assert {"error", "file_data", "start_line", "end_line", "next_offset"} <= fields
    assert callable(deepagents.HutchBackend.aexecute)
