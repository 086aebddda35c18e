"""``POST /translate_file`` and ``GET /download_file/{name}`` (LibreTranslate compatible): a
file translated whole (``server.documents``: the kinds in ``FORMATS``), kept for download for
``files_ttl_s`` under a random name, and answered with its URL, as LibreTranslate does.

The request is a multipart form: ``file``, ``source`` (a code or ``auto``), ``target``,
``api_key``, and LSMT's ``glossary`` and ``do_not_translate`` (JSON: an object, a list). The
caller, limits, languages and texts are checked as for ``/translate``; the characters counted
are those of the file's texts.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse
from pydantic import TypeAdapter, ValidationError
from starlette.datastructures import FormData, UploadFile

from ..auth import admit, caller_of, key_from_request
from ..dependencies import ServiceDep, StateDep
from ..documents import FORMATS, DocumentError, Languages, open_document
from ..errors import ApiError, bad_request
from ..request_texts import request_terms, service_translate
from ..schemas import LT_TRANSLATE_ERRORS, LTFileResponse
from ..state import AppState
from ..terms import translate_with_terms

router = APIRouter(tags=["LibreTranslate compatible"])
STORED_NAME = re.compile(r"^[0-9a-f]{32}\.[^/\\]{1,200}$")  # what translate_file writes
# The JSON form fields, with what the 400 says they must be.
GLOSSARY = TypeAdapter(dict[str, str]), "an object of terms"
TERM_LIST = TypeAdapter(list[str]), "a list of terms"
Parsed = TypeVar("Parsed")


def files_dir(state: AppState) -> Path:
    if state.files_dir is None:
        state.files_dir = Path(tempfile.mkdtemp(prefix="lsmt-files-"))
    return state.files_dir


FILE_FORM = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "source", "target"],
                    "properties": {
                        "file": {"type": "string", "format": "binary", "description": "The file"},
                        "source": {"type": "string", "description": "Language code or auto"},
                        "target": {"type": "string", "description": "Language code"},
                        "api_key": {"type": "string", "description": "API key"},
                        "glossary": {
                            "type": "string",
                            "description": "JSON object: source term -> target term (LSMT)",
                        },
                        "do_not_translate": {
                            "type": "string",
                            "description": "JSON list of terms kept as they are (LSMT)",
                        },
                    },
                }
            }
        },
    }
}


@router.post(
    "/translate_file",
    summary="Translate a file (LibreTranslate compatible; " + ", ".join(FORMATS) + ")",
    responses={200: {"model": LTFileResponse}, **LT_TRANSLATE_ERRORS},
    openapi_extra=FILE_FORM,
)
async def translate_file(request: Request, state: StateDep, service: ServiceDep) -> JSONResponse:
    # as the other LibreTranslate endpoints: a header key is checked before the body is read,
    # a key in the form after
    header_key = key_from_request(request)
    caller = await caller_of(request, header_key) if header_key is not None else None
    form = await request.form()
    if caller is None:
        form_key = form.get("api_key")
        given = form_key if isinstance(form_key, str) and form_key else None
        caller = await caller_of(request, given)
    upload = form.get("file")
    if not isinstance(upload, UploadFile) or not upload.filename:
        raise bad_request("missing_field", "Field 'file' (a file) is required.", parameter="file")
    source, target = _field(form, "source"), _field(form, "target")
    try:
        # reading and writing a document take CPU time: off the event loop
        document = await asyncio.to_thread(open_document, upload.filename, await upload.read())
    except DocumentError as exc:
        raise bad_request("unsupported_file", str(exc), allowed=list(FORMATS)) from None
    glossary = _json_field(form, "glossary", *GLOSSARY)
    keep = _json_field(form, "do_not_translate", *TERM_LIST)
    terms = await request_terms(state, caller, source, target, glossary, keep)
    service.validate_texts(document.texts, limit_count=False)
    service.validate_languages(source, target, None)
    await admit(state, caller, document.charged)
    translations = document.texts
    languages = Languages(source, target)  # the translation declares its target language
    if document.texts:
        deadline = time.monotonic() + state.settings.request_timeout_s
        opts = service.validate_options(None, 0, None)
        translate = service_translate(service, target, opts, None, deadline, caller.subject)
        results = await translate_with_terms(translate, document.texts, source, terms)
        translations = [r.text for r in results]
        if source == "auto":  # the language detected for most of the texts
            detected = Counter(r.source for r in results).most_common(1)[0][0]
            languages = Languages(detected, target)
    name = f"{secrets.token_hex(16)}.{Path(upload.filename).name}"
    _forget_old_files(files_dir(state), state.settings.files_ttl_s)
    written = await asyncio.to_thread(document.rebuild, translations, languages)
    (files_dir(state) / name).write_bytes(written)
    url = str(request.url_for("download_file", filename=name))
    return JSONResponse(LTFileResponse(translatedFileUrl=url).model_dump())


@router.get(
    "/download_file/{filename}",
    summary="A translated file (LibreTranslate compatible)",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}}, 404: {}},
)
async def download_file(filename: str, state: StateDep) -> FileResponse:
    path = files_dir(state) / filename
    if not STORED_NAME.match(filename) or not path.is_file():
        raise ApiError(404, "not_found", "No such file: it expired or was never written.")
    return FileResponse(path, filename=filename.split(".", 1)[1])


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    if not isinstance(value, str) or not value:
        raise bad_request("missing_field", f"Field {name!r} is required.", parameter=name)
    return value


def _json_field(
    form: FormData, name: str, shape: TypeAdapter[Parsed], described: str
) -> Parsed | None:
    """An optional form field holding JSON of ``shape`` (the glossary's object of terms, a
    list of terms); anything else answers 400 saying what it must be."""
    value = form.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            return shape.validate_json(value)
        except ValidationError:
            pass
    raise bad_request("invalid_field", f"Field {name!r} must be JSON: {described}.", parameter=name)


def _forget_old_files(root: Path, ttl_s: float) -> None:
    cutoff = time.time() - ttl_s
    for path in root.iterdir():
        if path.stat().st_mtime < cutoff:
            path.unlink(missing_ok=True)
