#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The build enforces the layers: with the flags a layer's library compiles
with (compile_commands.json), a header of every layer it may include is
found and one of every layer it may not include is not.

    check_layers.py BUILD_DIR

SEES restates the policy of layer_sees in meson.build on purpose: widening a
layer's view there fails here until this table (and docs/architecture.md)
say so too."""
import json
import os
import shlex
import subprocess
import sys

# One header per layer, including nothing beyond its own layer and core.
PROBE = {
    'core': 'core/log.h',
    'mem': 'mem/domain.h',
    'gpu': 'gpu/cuda_api.h',
    'congestion': 'congestion/cc.h',
    'transport': 'transport/registry.h',
    'drivers': 'drivers/shm/shm.h',
    'bootstrap': 'bootstrap/store_socket.h',
    'collectives': 'collectives/engine.h',
}
SEES = {
    'core': {'core'},
    'mem': {'core', 'mem'},
    'gpu': {'core', 'mem', 'gpu'},
    'congestion': {'congestion'},
    'transport': {'core', 'mem', 'congestion', 'transport'},
    'drivers': {'core', 'mem', 'gpu', 'congestion', 'transport', 'drivers'},
    'bootstrap': {'core', 'bootstrap'},
    'collectives': {'core', 'mem', 'gpu', 'transport', 'bootstrap', 'collectives'},
    'capi': set(),
}


def layer_command(commands, layer):
    """The compiler command of one source of libgrex_LAYER, made to check stdin's syntax."""
    for c in commands:
        if f'libgrex_{layer}.a.p/' not in c['output']:
            continue
        args = shlex.split(c['command']) if 'command' in c else list(c['arguments'])
        if os.path.basename(args[0]) == 'ccache':
            args = args[1:]
        out, skip = [], False
        for a in args:
            if skip:
                skip = False
            elif a in ('-o', '-c', '-MQ', '-MF', '-MT'):
                skip = True
            elif a != '-MD' and not a.startswith('-fdiagnostics-color'):
                out.append(a)
        return out + ['-fsyntax-only', '-x', 'c++', '-'], c['directory']
    return None, None


def main():
    build = sys.argv[1]
    with open(os.path.join(build, 'compile_commands.json')) as f:
        commands = json.load(f)
    failures = 0
    for layer, sees in SEES.items():
        cmd, cwd = layer_command(commands, layer)
        if cmd is None:
            print(f'FAIL: no compile command for libgrex_{layer}')
            failures += 1
            continue
        for other, header in PROBE.items():
            run = subprocess.run(cmd, cwd=cwd, input=f'#include "{header}"\n', capture_output=True, text=True)
            missing = f'{header}: No such file or directory' in run.stderr
            if missing == (other in sees):
                verdict = 'cannot include' if missing else 'can include'
                print(f'FAIL: {layer} {verdict} {header}')
                failures += 1
    if failures:
        return 1
    print(f'layers: each of {len(SEES)} layers includes exactly the layers it may see')
    return 0


if __name__ == '__main__':
    sys.exit(main())
