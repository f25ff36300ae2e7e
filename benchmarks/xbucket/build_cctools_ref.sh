#!/usr/bin/env bash
# Build the small part of cctools' dttools that the reference driver needs (bucketing*.c and
# their dependencies) into DEST/dttools/src/libdttools.a, from a cctools git directory (a bare
# mirror or a clone's .git). Nothing of cctools is copied into schedlab.
#   benchmarks/xbucket/build_cctools_ref.sh /path/to/cctools.git /tmp/cctools-ref [COMMIT]
# then: XBUCKET_CCTOOLS=/tmp/cctools-ref pytest benchmarks/xbucket/test_xbucket_bench_reference.py
set -euo pipefail
GIT=$1 DEST=$2 REV=${3:-HEAD}
SRC=$DEST/dttools/src
mkdir -p "$SRC" "$DEST/obj"
for f in $(git --git-dir="$GIT" ls-tree --name-only "$REV" dttools/src/ | grep -E '\.(c|h)$'); do
	git --git-dir="$GIT" show "$REV:$f" >"$SRC/$(basename "$f")"
done
git --git-dir="$GIT" rev-parse "$REV" >"$DEST/COMMIT"
# glibc >= 2.32 has no _sys_siglist (the only change, in string_signal, never called here)
sed -i 's/return (char \*)_sys_siglist\[sig\];/return (char *)strsignal(sig);/' "$SRC/stringtools.c"
# network / expression-evaluation entry points jx_parse links against; never called here
cat >"$DEST/stubs.c" <<'STUBS'
#include <stdlib.h>
struct link;
struct jx;
int link_printf(struct link *l, long stoptime, const char *fmt, ...) { abort(); }
long link_read(struct link *l, char *d, size_t c, long stoptime) { abort(); }
struct jx *jx_eval(struct jx *j, struct jx *ctx) { abort(); }
STUBS
FILES="bucketing bucketing_det_exhaust bucketing_det_greedy bucketing_exhaust
bucketing_exhaust_common bucketing_greedy bucketing_greedy_common bucketing_manager
bucketing_quantized rmsummary hash_table list random debug debug_file debug_stream xxmalloc
twister stringtools jx jx_print jx_parse jx_pretty_print buffer full_io timestamp path"
for f in $FILES; do
	gcc -O2 -DCCTOOLS_SOURCE='"schedlab-ref"' -I "$SRC" -c "$SRC/$f.c" -o "$DEST/obj/$f.o"
done
gcc -O2 -c "$DEST/stubs.c" -o "$DEST/obj/stubs.o"
rm -f "$SRC/libdttools.a"
ar rcs "$SRC/libdttools.a" "$DEST"/obj/*.o
echo "built $SRC/libdttools.a from cctools $(cat "$DEST/COMMIT")"
