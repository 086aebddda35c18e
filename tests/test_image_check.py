"""The images on a real container engine: `make image-check`'s steps (scripts/image_check.py)
inside the test suite. Docker when its daemon answers, else podman (`make test` installs it as
root with apt, `make install-podman`); skipped with the reason where this machine cannot run
one (no engine, no base image to be had, an engine that cannot start a container here).

The suite runs the server image's steps (`--steps server`: base image, a container runs,
build, health, the host's translations, uid 10001, 20 requests answered through `stop -t 40`,
exit 0), about a minute and a half once the base image and the layers are cached (77-155 s
with neither on a fresh machine); LSMT_IMAGE_CHECK_STEPS=all
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


def test_a_check_is_skipped_for_the_first_step_this_machine_could_not_run_never_for_a_failure():
    def results(*steps):
        return {
            name: image_check.report(name, outcome, 1.0, detail, 0.5)
            for name, outcome, detail in steps
        }

    no_container = results(
        ("engine", "PASS", "podman 4.3.1"),
        ("base", "PASS", "found"),
        ("container", "SKIP", "podman cannot run a container here: cgroups"),
        ("expected", "SKIP", image_check.AFTER_SKIP),
    )
    assert image_check.unavailable(no_container) == (
        "container: podman cannot run a container here: cgroups"
    )
    failed = results(
        ("engine", "PASS", "podman 4.3.1"),
        ("build", "FAIL", "RuntimeError: podman build: exit 1"),
        ("ready", "SKIP", image_check.AFTER_FAILURE),
    )
    assert image_check.unavailable(failed) is None
    assert image_check.unavailable(results(("engine", "PASS", "docker 27.1"))) is None


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_images_on_a_container_engine():
    steps = os.environ.get("LSMT_IMAGE_CHECK_STEPS", "server")
    if steps == "none":
        pytest.skip("LSMT_IMAGE_CHECK_STEPS=none")
    names = list(image_check.STEPS) if steps == "all" else list(image_check.SERVER_STEPS)
    results = image_check.run_steps(names)
    report = "\n".join(f"{name}: {result}" for name, result in results.items())
    assert not any(r.startswith("FAIL") for r in results.values()), report
    if why := image_check.unavailable(results):
        pytest.skip(f"not on this machine: {why}")
    assert all(r.startswith("PASS") for r in results.values()), report
