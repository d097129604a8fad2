// SPDX-License-Identifier: Apache-2.0
// Entry point of the RDMA verbs driver (RC queue pairs over rdma-core;
// Soft-RoCE, RoCE and InfiniBand NICs).
#pragma once

#include <grex/transport.h>

namespace grex::verbs {

/// Opens the verbs device. Params (env override in brackets):
///   dev        ibv device name, or a ";" list giving local rank i entry i [GREX_IB_DEV]; default: the first with an active port
///   port       port number [GREX_IB_PORT], default 1
///   gid_index  GID table index [GREX_IB_GID_INDEX]; default: the first RoCE v2
///              IPv4-mapped GID of the port (its IPv4 address is what rdma_cm binds)
///   ip         IPv4 address to bind instead (InfiniBand: the IPoIB address) [GREX_IB_IP]
///   timeout    local ACK timeout exponent, 4.096 us x 2^N [GREX_IB_TIMEOUT], default 14
///   retry_cnt  transport retries before a send fails [GREX_IB_RETRY_CNT], default 7
///   inline     largest payload sent inline [GREX_IB_INLINE], default 64
///   srq        1: one shared receive queue for all peers [GREX_IB_SRQ], default 0
///   eager      largest message sent eagerly, into the receiver's slot ring
///              [GREX_IB_EAGER], default 4096; 0: never (both sides' smaller value counts)
///   eager_slots  eager slots kept per peer [GREX_IB_EAGER_SLOTS], default 64
///   rate_limit where a congestion controller's rate is enforced [GREX_IB_RATE_LIMIT]:
///              auto (default): software pacing, plus the NIC's per-QP rate limit
///              where the device offers it for RC queue pairs; nic: require that
///              (kNotSupported where it is not offered); software: never the NIC's
///   confine    what an advert's rkey opens to the peer [GREX_IB_CONFINE]: auto (default):
///              a type 2 memory window bound to the posted receive, for that peer's
///              queue pair only, invalidated when the receive completes, where the
///              device has them; window: require that (kNotSupported elsewhere);
///              register: a registration of the receive's bytes alone, made for
///              its advert and dropped when it completes (the device checks its
///              range; any queue pair of the protection domain may use it);
///              region: the whole registered region's rkey
/// Errors: kNotFound when no RDMA device (or the named one) exists;
/// kNotSupported for rate_limit=nic on a device without RC packet pacing, and for
/// confine=window on one without type 2 memory windows.
Result<std::unique_ptr<Device>> open_device(const DeviceOptions& opts);

}  // namespace grex::verbs
