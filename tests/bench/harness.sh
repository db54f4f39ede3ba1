#!/usr/bin/env bash
# Builds dev-centr/harness's CLI for the side-by-side actor CLI benchmark
# (`actors_cli --harness PATH`). Optional: nothing in the test suite needs it.
#
#   tests/bench/harness.sh HARNESS_SRC [BUILD_DIR]
#
# HARNESS_SRC is a checkout of dev-centr/harness (dub.sdl, source/harness/*.d). It is copied to
# BUILD_DIR (default: a fresh directory under the system temp dir; never inside this repository)
# and built there with `dub build -b release --compiler=ldc2` (Debian: `apt-get install -y ldc
# dub`). Two local adaptations, both outside the spawn path's logic:
#   - the `tgc` garbage collector (a path dependency on ../../dlang-supplemental/tgc) is left
#     out: source/harness/rt.d becomes an empty module and druntime's default GC runs;
#   - with a Phobos older than JSONValue.emptyObject / emptyArray (LDC 1.30 = Phobos 2.100),
#     those calls are replaced by equivalent helpers (an empty associative array / array).
# Prints the path of the built binary on its last line.
set -euo pipefail

src=${1:?usage: tests/bench/harness.sh HARNESS_SRC [BUILD_DIR]}
out=${2:-$(mktemp -d "${TMPDIR:-/tmp}/harness-build.XXXXXX")}
command -v ldc2 >/dev/null && command -v dub >/dev/null ||
    { echo "needs ldc2 and dub (apt-get install -y ldc dub)" >&2; exit 1; }

mkdir -p "$out"
cp -r "$src"/dub.sdl "$src"/source "$out"/
cd "$out"

# No tgc: drop the dependency and its version flag; rt.d imports nothing.
sed -i '/dependency "tgc"/d; /versions "Tgc_default"/d' dub.sdl
cat >source/harness/rt.d <<'EOF'
module harness.rt;
// Local benchmark build: tgc is not available; druntime's default GC runs.
EOF

# Older Phobos: JSONValue.emptyObject / emptyArray.
probe=$(mktemp -d)
echo 'import std.json; static assert(__traits(hasMember, JSONValue, "emptyObject"));' >"$probe/p.d"
if ! ldc2 -o- "$probe/p.d" >/dev/null 2>&1; then
    cat >source/harness/compat.d <<'EOF'
module harness.compat;
// Local benchmark build: stands in for JSONValue.emptyObject / emptyArray (newer Phobos).
import std.json : JSONValue;
JSONValue jsonEmptyObject() { JSONValue[string] a; return JSONValue(a); }
JSONValue jsonEmptyArray() { JSONValue[] a; return JSONValue(a); }
EOF
    for f in source/harness/*.d; do
        grep -q 'JSONValue\.empty' "$f" || continue
        sed -i 's/JSONValue\.emptyObject/jsonEmptyObject()/g; s/JSONValue\.emptyArray/jsonEmptyArray()/g' "$f"
        sed -i '0,/^import std\.json/s//import harness.compat;\nimport std.json/' "$f"
    done
fi

rm -rf "$probe"

dub build -b release --compiler=ldc2 >&2
echo "$out/harness"
