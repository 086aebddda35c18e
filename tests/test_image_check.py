"""The images on a real container engine: `make image-check`'s steps (scripts/image_check.py)
inside the test suite. Docker when its daemon answers, else podman (`make install-podman`);
skipped with the reason when neither can run containers. `make test` does not install an
engine: on a fresh machine the base image and a cold build take many minutes (docs/deploy.md).

The suite runs the server image's steps (`--steps server`: base image, build, health, the
host's translations, uid 10001, 20 requests answered through `stop -t 40`, exit 0), about a
minute and a half once the base image and the layers are cached; LSMT_IMAGE_CHECK_STEPS=all
adds the loadtest image and the compose stack, as `make image-check` does, and `none` skips it
(docs/deploy.md gives the times)."""

from __future__ import annotations

import os

import pytest

from scripts import image_check


def test_the_steps_are_documented_and_the_server_ones_a_subset():
    doc = image_check.__doc__ or ""
    for name in image_check.STEPS:
        assert f"\n  {name} " in doc, f"step {name} not in scripts/image_check.py's docstring"
    assert set(image_check.SERVER_STEPS) <= set(image_check.STEPS)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_images_on_a_container_engine():
    steps = os.environ.get("LSMT_IMAGE_CHECK_STEPS", "server")
    if steps == "none":
        pytest.skip("LSMT_IMAGE_CHECK_STEPS=none")
    names = list(image_check.STEPS) if steps == "all" else list(image_check.SERVER_STEPS)
    results = image_check.run_steps(names)
    if results["engine"].startswith("SKIP"):
        pytest.skip(f"no container engine: {results['engine']}")
    report = "\n".join(f"{name}: {result}" for name, result in results.items())
    assert all(r.startswith("PASS") for r in results.values()), report
