# The Dockerfile installs exactly the Debian packages scripts/setup.sh installs, builds cadre and
# puts the tokenizer shim where cadre looks for it (<bin>/../lib). A static check of the files:
# there is no Docker daemon on these machines, so the image is never built here.
# Run by ctest (DeployDockerfile) with CADRE_SOURCE_DIR set.
import os
import posixpath
import re

SOURCE = os.environ.get("CADRE_SOURCE_DIR")
if not SOURCE:
    raise RuntimeError("CADRE_SOURCE_DIR must be set (ctest sets it)")


def read(rel):
    with open(os.path.join(SOURCE, rel), encoding="utf-8") as f:
        return f.read()


def words(text):
    """The words of shell text, less comments and line continuations."""
    joined = " ".join(re.sub(r"#.*", "", line) for line in text.split("\n"))
    return [w for w in re.split(r"[\s\\]+", joined) if w]


def setup_packages():
    m = re.search(r"^packages=\(\n(.*?)^\)", read("scripts/setup.sh"), re.S | re.M)
    assert m, "no packages=( ... ) list in scripts/setup.sh"
    return words(m[1])


def docker_packages():
    installs = re.findall(r"apt-get install ((?:[^&]|&(?!&))*)&&", read("Dockerfile"))
    assert len(installs) == 1, f"expected one apt-get install in the Dockerfile, found {len(installs)}"
    return [w for w in words(installs[0]) if not w.startswith("-")]


def test_dockerfile_installs_setup_packages_no_more_no_fewer():
    setup, docker = setup_packages(), docker_packages()
    assert len(setup) > 10 and "libtorch-dev" in setup, f"setup.sh's list looks wrong: {setup}"
    only_setup = sorted(set(setup) - set(docker))
    only_docker = sorted(set(docker) - set(setup))
    assert sorted(docker) == sorted(setup), \
        f"only in scripts/setup.sh: {only_setup}; only in the Dockerfile: {only_docker}"
    assert len(set(docker)) == len(docker), "a package is listed twice in the Dockerfile"


def test_dockerfile_builds_cadre_puts_it_on_path_and_the_shim_in_lib():
    text = read("Dockerfile")
    assert re.search(r"^FROM debian:bookworm\b", text, re.M), "the image is not based on debian:bookworm"
    assert re.search(r"cmake --build \S+ --target cadre", text), "the Dockerfile does not build cadre"
    bin_ = re.search(r"install -D -m 755 \S+/bin/cadre (\S+)", text)
    lib = re.search(r"install -D -m 755 \S+/lib/libcadre_spm\.so (\S+)", text)
    assert bin_ and lib, "cadre or libcadre_spm.so is not installed"
    bin_, lib = bin_[1], lib[1]
    assert posixpath.dirname(lib) == posixpath.join(posixpath.dirname(posixpath.dirname(bin_)), "lib"), \
        f"the shim {lib} is not in {bin_}/../lib"
    assert re.search(f"ln -s {re.escape(bin_)} /usr/local/bin/cadre", text), "cadre is not linked onto PATH"
    # The whole checkout is copied in (CMake reads cmake/, include/, src/), less builds and data.
    assert re.search(r"^COPY \. /src$", text, re.M), "the checkout is not copied to /src"
    ignored = read(".dockerignore").split("\n")
    for p in ("build*", "third_party", "runs"):
        assert p in ignored, f"{p} is not in .dockerignore"
    # The manifests' default mount path is the image's working directory.
    assert re.search(r"^WORKDIR /workspace$", text, re.M), "the working directory is not /workspace"
