#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# softroce.sh --selftest: the scripts it runs on the device, sourced by
# tests/scripts/softroce.sh. selftest_script (one host) and selftest2_script
# (both guests of --hosts 2) print a POSIX sh script for the guest or host to run.
# The start both scripts share: a scratch directory and the result counter.
selftest_prelude() {
  cat <<'EOF'
set -u
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
result() { echo "selftest: $1: $2"; [ "$2" = pass ] || fails=$((fails + 1)); }
EOF
}

# The selftest command: device query, then an ib_write_bw server + client on the rxe
# device, with plain sockets and with rdma_cm (-R).
selftest_script() {
  selftest_prelude
  cat <<'EOF'
if ibv_devinfo -d "$GREX_RXE_DEV"; then result ibv_devinfo pass; else result ibv_devinfo FAIL; fi
bw() {  # $1 = name, rest = extra ib_write_bw flags
  name=$1; shift
  set -- -d "$GREX_RXE_DEV" -x "$GREX_IB_GID_INDEX" -s 65536 -n 200 "$@"
  timeout 120 ib_write_bw "$@" >"$dir/server.log" 2>&1 &
  server=$!
  # The client fails fast until the server listens: retry it.
  tries=0
  until timeout 60 ib_write_bw "$@" "$GREX_RXE_IP" >"$dir/client.log" 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge 30 ] || ! kill -0 "$server" 2>/dev/null; then
      cat "$dir/client.log" "$dir/server.log"; kill "$server" 2>/dev/null; wait "$server"
      result "$name" FAIL; return
    fi
    sleep 1
  done
  cat "$dir/client.log"
  if wait "$server"; then result "$name" pass; else cat "$dir/server.log"; result "$name" FAIL; fi
}
bw ib_write_bw
bw "ib_write_bw -R" -R
if [ "$fails" = 0 ]; then echo "selftest: PASS"; else echo "selftest: FAIL ($fails failed)"; exit 1; fi
EOF
}

# The two-host selftest command, run in both guests: the device, plain IP both ways
# (ping, then a TCP line from guest 1 to a listener on guest 0 and an answer back, as
# the job rendezvous store does), then ib_write_bw (plain and -R) and ib_write_lat,
# each with the server on guest 0 and the client on guest 1.
selftest2_script() {
  selftest_prelude
  cat <<'EOF2'
me=$GREX_HOST_INDEX
peer=$GREX_PEER_IP
echo "selftest: host $me of $GREX_HOST_COUNT: $GREX_RXE_DEV on $GREX_RXE_NETDEV ($GREX_RXE_IP, MTU $(cat "/sys/class/net/$GREX_RXE_NETDEV/mtu"), GID index $GREX_IB_GID_INDEX), peer $peer"
if ibv_devinfo -d "$GREX_RXE_DEV" >"$dir/devinfo" 2>&1; then
  grep -E 'hca_id|state:|active_mtu|link_layer' "$dir/devinfo"
  result ibv_devinfo pass
else
  cat "$dir/devinfo"; result ibv_devinfo FAIL
fi
# The peer may still be booting: wait until it answers.
tries=0
until busybox ping -c 1 -W 1 "$peer" >/dev/null 2>&1; do
  tries=$((tries + 1))
  [ "$tries" -lt 90 ] || break
done
if busybox ping -c 3 -s 8000 "$peer" >"$dir/ping" 2>&1; then
  tail -1 "$dir/ping"; result "ping -s 8000 $peer" pass
else
  cat "$dir/ping"; result "ping -s 8000 $peer" FAIL
fi
if [ "$me" = 0 ]; then
  timeout 120 busybox nc -l -p 17777 -e sh -c "read -r l; echo \"\$l\" >$dir/tcp; echo \"ack \$l\""
  if [ "$(cat "$dir/tcp" 2>/dev/null)" = "hello from g1" ]; then
    result "tcp from $peer" pass
  else
    result "tcp from $peer" FAIL
  fi
else
  tries=0
  until bash -c 'exec 3<>"/dev/tcp/$1/17777" && echo "hello from g1" >&3 && read -r r <&3 && [ "$r" = "ack hello from g1" ]' tcp "$peer" 2>/dev/null; do
    tries=$((tries + 1))
    [ "$tries" -lt 60 ] || break
    sleep 1
  done
  if [ "$tries" -lt 60 ]; then result "tcp to $peer:17777" pass; else result "tcp to $peer:17777" FAIL; fi
fi
perf() {  # $1 = name, $2 = tool, $3 = port, rest = extra flags
  name=$1 tool=$2 port=$3
  shift 3
  set -- -d "$GREX_RXE_DEV" -x "$GREX_IB_GID_INDEX" -p "$port" "$@"
  if [ "$me" = 0 ]; then
    if timeout 120 "$tool" "$@" >"$dir/server.log" 2>&1; then
      result "$name server" pass
    else
      cat "$dir/server.log"; result "$name server" FAIL
    fi
    return
  fi
  # The client fails fast until the server listens: retry it.
  tries=0
  until timeout 60 "$tool" "$@" "$peer" >"$dir/client.log" 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge 60 ]; then
      cat "$dir/client.log"; result "$name client" FAIL; return
    fi
    sleep 1
  done
  cat "$dir/client.log"
  result "$name client" pass
}
perf ib_write_bw ib_write_bw 18515 -s 65536 -n 200
perf "ib_write_bw -R" ib_write_bw 18516 -s 65536 -n 200 -R
perf ib_write_lat ib_write_lat 18517
if [ "$fails" = 0 ]; then echo "selftest: PASS"; else echo "selftest: FAIL ($fails failed)"; exit 1; fi
EOF2
}
