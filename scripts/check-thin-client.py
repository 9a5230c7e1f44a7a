#!/usr/bin/env python3
"""The shell links the thin client library only (issue 61): apps/berth's
link line names no server library: not the actors (berth_actors), the
SQLite stores (berth_persistence, sqlite3), the Raft core (berth_raft), the
CSI client (berth_csi, gRPC) or the metrics (prometheus-cpp).  The shell
sends messages to a server; it carries none of what answers them.

Usage: check-thin-client.py BUILD_DIR   (exit 0: thin; 1: names what to fix)
Reads the link command CMake wrote for the target `berth` (link.txt with the
Makefile generators, build.ninja with Ninja)."""

import os
import re
import sys

SERVER_ONLY = ["berth_actors", "berth_persistence", "berth_raft", "berth_csi",
               "berth_csi_translate", "sqlite3", "grpc", "prometheus"]


def link_line(build):
    txt = os.path.join(build, "apps", "berth", "CMakeFiles", "berth.dir", "link.txt")
    if os.path.exists(txt):
        with open(txt) as f:
            return f.read()
    ninja = os.path.join(build, "build.ninja")
    if os.path.exists(ninja):
        with open(ninja) as f:
            text = f.read()
        m = re.search(r"^build apps/berth/berth: .*?(?=^build |\Z)", text, re.M | re.S)
        if m:
            return m.group(0)
    return None


def offenders(line):
    found = []
    for token in line.split():
        name = os.path.basename(token)
        for lib in SERVER_ONLY:
            if re.match(r"^(lib)?%s([._-]|$)" % re.escape(lib), name) or token == "-l" + lib:
                found.append((lib, token))
    return found


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    line = link_line(sys.argv[1])
    if line is None:
        print("check-thin-client: no link command for apps/berth under %s (build the target "
              "`berth` first)" % sys.argv[1], file=sys.stderr)
        return 1
    found = offenders(line)
    for lib, token in found:
        print("apps/berth links the server library %s (%s): the shell must link the thin "
              "client library only; link what it needs from berth_interfaces, berth_tls, "
              "berth_control or berth_durable instead (apps/berth/CMakeLists.txt)" % (lib, token),
              file=sys.stderr)
    if found:
        return 1
    # The check itself: a line with a server library is caught.
    assert offenders("c++ -o berth libberth_cli.a /x/actors/libberth_actors.a -lsqlite3")
    assert not offenders("c++ -o berth libberth_cli.a ../../actors/libberth_interfaces.a")
    print("apps/berth links no server library")
    return 0


if __name__ == "__main__":
    sys.exit(main())
