// SPDX-License-Identifier: Apache-2.0
// Entry point of the DPDK driver (grex's reliable protocol over UDP/IPv4 on DPDK ports).
#pragma once

#include <grex/transport.h>

namespace grex::dpdk {

/// Opens the dpdk device. Params (env override in brackets):
///   mode       "memif" (a memif port per peer, one host) or "port" [GREX_DPDK_MODE]
///   port       port mode: the vdev, e.g. net_af_xdp0,iface=veth0; a ";" list gives local rank i entry i [GREX_DPDK_PORT]
///   ip         port mode: this rank's IPv4 [GREX_DPDK_IP]
///   mac        port mode: auto (a private MAC on af_packet, so the kernel
///              drops grex's frames before its IP stack), port, private or
///              aa:bb:cc:dd:ee:ff [GREX_DPDK_MAC], default auto
///   udp_port   UDP port of every rank [GREX_DPDK_UDP_PORT], default 47000
///   mtu        [GREX_DPDK_MTU], default 9000 (memif) / 1500 (port)
///   memif_dir  where memif sockets live [GREX_DPDK_MEMIF_DIR], default /tmp
///   window     packets in flight per flow [GREX_DPDK_WINDOW], default 1024
///   paths      UDP source ports a flow's data packets spray over, round robin: the
///              entropy ECMP hashes [GREX_DPDK_PATHS], 1..64, default 1; every rank the same
///   spray      with paths > 1: rr (round robin, default) or reps (reuse the paths the
///              peer's ACKs covered, forget those whose packets were resent) [GREX_DPDK_SPRAY]
///   path_cc    with paths > 1 and a controller: flow (default: one controller per flow,
///              fed by its timing probes) or path (one per path, fed by the RTTs the
///              ACKs echo for it and its losses; a packet goes on a path with room in
///              its bucket and window, the flow paced at the paths' summed windows and
///              rates) [GREX_DPDK_PATH_CC]
///   reorder    packets a late one may be overtaken by before it counts as lost, for
///              paths that reorder (ECMP spraying) [GREX_DPDK_REORDER], 0..63, default 0
///   give_up_ms a silent peer is declared gone after this [GREX_DPDK_GIVE_UP_MS], default 10000
///   tx_backlog packets a port's software TX queue holds before flows wait
///              [GREX_DPDK_TX_BACKLOG], default 32
///   crc        header | payload: what CRC32C covers [GREX_DPDK_CRC], default header
///   faults     drop=P,dup=P,reorder=P,window=N,corrupt=P,seed=S [GREX_DPDK_FAULTS]
///   cc         congestion control per flow: rttcc, rttcc-template, dcqcn, dcqcn-mlx5,
///              timely, swift, none [GREX_CC], default none
///   cc_target_us  RTTCC's target RTT here [GREX_CC_TARGET_US], default 50 (software
///              timestamps: host polling jitter is tens of microseconds); 200 on
///              af_packet and af_xdp, whose RTT carries the kernel's per-packet work
///   line_gbps  the line rate the controller starts from and never exceeds
///              [GREX_DPDK_LINE_GBPS], default the port's link speed, else 100
///   bottleneck_mbps, bottleneck_kb  an emulated bottleneck in front of this
///              rank's receive path: frames wait in a FIFO served at that rate,
///              tail-dropped beyond the queue size (tests of congestion control)
///              [GREX_DPDK_BOTTLENECK_MBPS, GREX_DPDK_BOTTLENECK_KB], default off / 4096
/// EAL arguments: GREX_DPDK_ARGS, GREX_DPDK_LCORE, GREX_DPDK_HUGE, GREX_DPDK_PIN.
Result<std::unique_ptr<Device>> open_device(const DeviceOptions& opts);

}  // namespace grex::dpdk
