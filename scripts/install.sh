#!/usr/bin/env bash
# Builds and installs localcloud (go install ./cmd/localcloud) and says
# what is going on while it runs: the first build downloads the modules and
# compiles modernc.org/sqlite, a pure-Go translation of SQLite (about 10 MB
# of Go in one package) that takes minutes on a 2-core machine and prints
# nothing while it compiles. Later builds come from Go's cache in seconds.
#
#   scripts/install.sh        from a clone of this repository
#
# Everything after the script's name is passed to go install (e.g. -race).
set -euo pipefail
cd "$(dirname "$0")/.."
gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
echo "localcloud: go install -v ./cmd/localcloud (the first build takes 3-8 minutes on 2 cores: modernc.org/sqlite is a large pure-Go package; later builds take seconds)"
start=$SECONDS
go install -v "$@" ./cmd/localcloud >"$log" 2>&1 &
pid=$!
shown=0
while kill -0 "$pid" 2>/dev/null; do
	sleep 2
	n=$(wc -l <"$log")
	if [ "$n" -gt "$shown" ]; then
		sed -n "$((shown + 1)),${n}p" "$log" | sed 's/^/  /'
		shown=$n
	elif [ $(((SECONDS - start) % 20)) -lt 2 ]; then
		last="$(tail -n 1 "$log")"
		echo "  ... $((SECONDS - start)) s, still compiling ${last:-the first packages}"
	fi
done
status=0
wait "$pid" || status=$?
n=$(wc -l <"$log")
[ "$n" -gt "$shown" ] && sed -n "$((shown + 1)),${n}p" "$log" | sed 's/^/  /'
if [ "$status" -ne 0 ]; then
	echo "localcloud: go install failed (exit $status)" >&2
	exit "$status"
fi
echo "localcloud: installed $gobin/localcloud in $((SECONDS - start)) s"
case ":$PATH:" in
*":$gobin:"*) ;;
*) echo "localcloud: $gobin is not on your PATH; add it: export PATH=\"$gobin:\$PATH\"" ;;
esac
