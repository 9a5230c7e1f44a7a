#!/usr/bin/env python3
"""Fails when git tracks a build output, naming each file and the fix.

Run by `make test` (ctest `repo.tracked_outputs`, label unit).  A tracked
output is a file git lists (`git ls-files`) that
  - lies under a build or output directory: build/, build-*/, build_*/,
    cmake-build-*/, CMakeFiles/, Testing/, _deps/, __pycache__/,
    node_modules/, .dev/, .chaos/, test-output/, sanitizer-logs/ (any level);
  - has a build output's name: CMakeCache.txt, cmake_install.cmake,
    CTestTestfile.cmake, compile_commands.json, build.ninja, .ninja_log,
    .ninja_deps, install_manifest.txt, perf.data, perf.data.old, a.out,
    core, core.N, vgcore.N;
  - has a build output's extension: .o .obj .a .so .so.N .lo .la .gch .pch
    .d .pyc .pyo .gcda .gcno .profraw .profdata .exe;
  - or starts like one whatever its name: an ELF object or executable, an ar
    archive, a GCC precompiled header, a perf.data file.
Each is printed with its reason and `git rm --cached FILE` (which keeps the
file on disk); the outputs .gitignore does not cover yet belong there too.

usage: scripts/check-tracked-outputs.py [REPO]   (default: this checkout)
       scripts/check-tracked-outputs.py --self-test
Exit 0: none tracked; 1: some tracked (listed); 77: REPO is not a git
checkout (ctest reports the test as skipped).
"""
import os
import re
import subprocess
import sys
import tempfile

OUTPUT_DIRS = re.compile(
    r"^(build|build[-_.].*|cmake-build-.*|CMakeFiles|Testing|_deps|__pycache__|node_modules"
    r"|\.dev|\.chaos|test-output|sanitizer-logs)$")
OUTPUT_NAMES = re.compile(
    r"^(CMakeCache\.txt|cmake_install\.cmake|CTestTestfile\.cmake|compile_commands\.json"
    r"|build\.ninja|\.ninja_log|\.ninja_deps|install_manifest\.txt|perf\.data|perf\.data\.old"
    r"|a\.out|core|core\.[0-9]+|vgcore\.[0-9]+)$")
OUTPUT_EXTENSIONS = re.compile(
    r"\.(o|obj|a|so|so\.[0-9.]+|lo|la|gch|pch|d|pyc|pyo|gcda|gcno|profraw|profdata|exe)$")
MAGICS = [
    (b"\x7fELF", "an ELF object or executable"),
    (b"!<arch>\n", "an ar archive (a static library)"),
    (b"gpch", "a GCC precompiled header"),
    (b"PERFILE2", "a perf.data file"),
]


def reason(repo, path):
    """Why PATH (relative to REPO) is a build output, or None."""
    parts = path.split("/")
    for d in parts[:-1]:
        if OUTPUT_DIRS.match(d):
            return "under %s/, a build or output directory" % d
    name = parts[-1]
    if OUTPUT_NAMES.match(name):
        return "%s is a build output's name" % name
    m = OUTPUT_EXTENSIONS.search(name)
    if m:
        return "%s is a build output's extension" % m.group(0)
    full = os.path.join(repo, path)
    if os.path.isfile(full) and not os.path.islink(full):
        try:
            with open(full, "rb") as f:
                head = f.read(8)
        except OSError:
            return None
        for magic, what in MAGICS:
            if head.startswith(magic):
                return "its content is %s" % what
    return None


def check(repo, out=sys.stdout):
    """Returns the exit status for REPO, printing what it finds."""
    r = subprocess.run(["git", "-C", repo, "rev-parse", "--show-toplevel"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print("%s is not a git checkout: nothing to check" % repo, file=out)
        return 77
    top = r.stdout.strip()
    files = subprocess.run(["git", "-C", top, "ls-files", "-z"], capture_output=True,
                           check=True).stdout.decode("utf-8", "surrogateescape").split("\0")
    found = [(f, why) for f in files if f for why in [reason(top, f)] if why]
    if not found:
        print("no build output tracked (%d files checked in %s)" % (len([f for f in files if f]), top),
              file=out)
        return 0
    print("git tracks %d build output%s in %s:" % (len(found), "" if len(found) == 1 else "s", top),
          file=out)
    for f, why in found:
        print("  %s: %s" % (f, why), file=out)
    print("Fix: untrack each (the file stays on disk), and add its pattern to .gitignore:", file=out)
    for f, _ in found:
        print("  git rm --cached '%s'" % f.replace("'", "'\\''"), file=out)
    return 1


def self_test():
    """The check on a scratch repository: a clean one passes, and every kind
    of output added is named with its fix."""
    import io

    def git(repo, *args):
        subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True)

    with tempfile.TemporaryDirectory(prefix="berth-tracked-") as repo:
        git(repo, "init", "-q")
        clean = {"src/main.cpp": b"int main() {}\n", "docs/building.md": b"# build\n",
                 "scripts/build-deps.sh": b"#!/bin/sh\n", "tests/fuzz/corpus/seed": b"\x00\x01ELF"}
        outputs = {"build/apps/berthd": b"x", "sub/build-asan/x.txt": b"x",
                   "CMakeFiles/a.txt": b"x", "CMakeCache.txt": b"x", "bench/perf.data": b"x",
                   "lib/control.o": b"x", "libberth.a": b"x", "pch/cmake_pch.hxx.gch": b"x",
                   "tools/berth": b"\x7fELF\x02\x01\x01", "tools/archive": b"!<arch>\nx",
                   "bench/profile": b"PERFILE2xx", "scripts/__pycache__/x.cpython-311.pyc": b"x"}
        for files in (clean, outputs):
            for path, data in files.items():
                os.makedirs(os.path.dirname(os.path.join(repo, path)) or repo, exist_ok=True)
                with open(os.path.join(repo, path), "wb") as f:
                    f.write(data)
        git(repo, "add", "-f", *clean)
        text = io.StringIO()
        if check(repo, text) != 0:
            print("self-test: a clean repository failed:\n" + text.getvalue())
            return 1
        git(repo, "add", "-f", *outputs)
        text = io.StringIO()
        status = check(repo, text)
        report = text.getvalue()
        missing = [p for p in outputs if "git rm --cached '%s'" % p not in report]
        wrong = [p for p in clean if p + ":" in report]
        if status != 1 or missing or wrong:
            print("self-test failed (status %d); not named: %s; named wrongly: %s\n%s"
                  % (status, missing, wrong, report))
            return 1
        with tempfile.TemporaryDirectory(prefix="berth-not-git-") as plain:
            if check(plain, io.StringIO()) != 77:
                print("self-test: a directory outside git was not skipped")
                return 1
    print("self-test: a clean repository passes; %d outputs named with their fix" % len(outputs))
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    return check(repo)


if __name__ == "__main__":
    sys.exit(main())
