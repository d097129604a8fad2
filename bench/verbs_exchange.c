// SPDX-License-Identifier: Apache-2.0
// The floor of a two-rank small-message exchange on a verbs device, in raw
// libibverbs with nothing of grex in it: one RC queue pair per side, receives
// pre-posted, each message one SEND (inline where it fits), busy polling.
//   -m pingpong  one message in flight: A sends, B answers (ib_send_lat's
//                pattern); prints half the round trip, as ib_send_lat's t_typical
//   -m cross     both sides send at once and wait for the other's message (a
//                2-rank allreduce's one exchange); prints the time per exchange
// Usage (perftest's form, the same device and GID index flags):
//   verbs_exchange -d DEV -x GID [-p PORT] [-s BYTES] [-n ITERS] [-m MODE]        (server)
//   verbs_exchange -d DEV -x GID [-p PORT] [-s BYTES] [-n ITERS] [-m MODE] IP     (client)
//   -w           RDMA WRITE WITH IMMEDIATE into the peer's receive slot instead of SEND
// Output: one line "MODE BYTES ITERS t_min t_median t_max" in microseconds.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { kRecvDepth = 64 };


struct wire {  // what each side tells the other over TCP
  uint32_t qpn, psn, rkey;
  uint64_t addr;  // the receive slots (-w)
  uint8_t gid[16];
};

static void die(const char* what) {
  perror(what);
  exit(1);
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static int tcp_connect(const char* ip, int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) die("socket");
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (ip == NULL) {
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(s, (struct sockaddr*)&a, sizeof a) != 0 || listen(s, 1) != 0) die("bind/listen");
    int c = accept(s, NULL, NULL);
    if (c < 0) die("accept");
    close(s);
    return c;
  }
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) die("inet_pton");
  for (int i = 0; connect(s, (struct sockaddr*)&a, sizeof a) != 0; ++i) {
    if (i == 100) die("connect");
    usleep(100000);
  }
  return s;
}

static void xfer(int s, const void* out, void* in, size_t n) {
  if (write(s, out, n) != (ssize_t)n) die("write");
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(s, (char*)in + got, n - got);
    if (r <= 0) die("read");
    got += (size_t)r;
  }
}

int main(int argc, char** argv) {
  const char* dev_name = NULL;
  int gid_index = 1, port = 18515, opt;
  size_t size = 8;
  long iters = 5000;
  int cross = 0, write_imm = 0;
  while ((opt = getopt(argc, argv, "d:x:p:s:n:m:w")) != -1) {
    switch (opt) {
      case 'd': dev_name = optarg; break;
      case 'x': gid_index = atoi(optarg); break;
      case 'p': port = atoi(optarg); break;
      case 's': size = strtoul(optarg, NULL, 0); break;
      case 'n': iters = atol(optarg); break;
      case 'm': cross = strcmp(optarg, "cross") == 0; break;
      case 'w': write_imm = 1; break;
      default:
        fprintf(stderr, "usage: verbs_exchange -d DEV -x GID [-p PORT] [-s BYTES] [-n ITERS] [-m pingpong|cross] [-w] [IP]\n");
        return 2;
    }
  }
  const char* peer_ip = optind < argc ? argv[optind] : NULL;
  if (size == 0 || iters <= 0) return 2;

  int ndev = 0;
  struct ibv_device** list = ibv_get_device_list(&ndev);
  struct ibv_device* dev = NULL;
  for (int i = 0; list != NULL && i < ndev; ++i)
    if (dev_name == NULL || strcmp(ibv_get_device_name(list[i]), dev_name) == 0) dev = list[i];
  if (dev == NULL) {
    fprintf(stderr, "verbs_exchange: no device %s\n", dev_name ? dev_name : "");
    return 1;
  }
  struct ibv_context* ctx = ibv_open_device(dev);
  if (ctx == NULL) die("ibv_open_device");
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 2 * kRecvDepth + 16, NULL, NULL, 0);
  if (pd == NULL || cq == NULL) die("pd/cq");
  // Buffer: one send slot, then kRecvDepth receive slots.
  size_t stride = (size + 63) & ~(size_t)63;
  uint8_t* buf = aligned_alloc(4096, ((stride * (kRecvDepth + 1)) + 4095) & ~(size_t)4095);
  memset(buf, 0, stride * (kRecvDepth + 1));
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, stride * (kRecvDepth + 1), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (mr == NULL) die("ibv_reg_mr");
  struct ibv_qp_init_attr qia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                 .cap = {.max_send_wr = 64, .max_recv_wr = kRecvDepth, .max_send_sge = 1,
                                         .max_recv_sge = 1, .max_inline_data = 256}};
  struct ibv_qp* qp = ibv_create_qp(pd, &qia);
  if (qp == NULL) die("ibv_create_qp");
  const uint32_t max_inline = qia.cap.max_inline_data;

  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) die("INIT");
  for (int i = 0; i < kRecvDepth; ++i) {
    struct ibv_sge sg = {(uintptr_t)(buf + stride * (size_t)(i + 1)), (uint32_t)size, mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sg, .num_sge = 1}, *bad;
    if (ibv_post_recv(qp, &wr, &bad)) die("ibv_post_recv");
  }
  struct ibv_port_attr pa;
  union ibv_gid gid;
  if (ibv_query_port(ctx, 1, &pa) || ibv_query_gid(ctx, 1, gid_index, &gid)) die("query port/gid");
  srand48(getpid());
  struct wire me = {.qpn = qp->qp_num, .psn = (uint32_t)lrand48() & 0xffffff, .rkey = mr->rkey,
                    .addr = (uintptr_t)(buf + stride)}, them;
  memcpy(me.gid, gid.raw, 16);
  int s = tcp_connect(peer_ip, port);
  xfer(s, &me, &them, sizeof me);

  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = pa.active_mtu;
  a.dest_qp_num = them.qpn;
  a.rq_psn = them.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  memcpy(a.ah_attr.grh.dgid.raw, them.gid, 16);
  a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
  a.ah_attr.grh.hop_limit = 1;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("RTR");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = me.psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_MAX_QP_RD_ATOMIC))
    die("RTS");
  char go = 1, got;
  xfer(s, &go, &got, 1);  // both queue pairs are ready to receive

  const int first = peer_ip != NULL;  // the client starts a ping-pong
  struct ibv_sge ssg = {(uintptr_t)buf, (uint32_t)size, mr->lkey};
  struct ibv_send_wr swr = {.sg_list = &ssg, .num_sge = 1, .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED | (size <= max_inline ? IBV_SEND_INLINE : 0)};
  if (write_imm) {  // as an eager protocol does: the data written into the peer's slot, a receive for the immediate
    swr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    swr.wr.rdma.remote_addr = them.addr;
    swr.wr.rdma.rkey = them.rkey;
  }
  double* samples = malloc(sizeof(double) * (size_t)iters);
  long warmup = iters / 10 + 10;
  long sends_left = 0, recvs_left = 0;
  for (long it = -warmup; it < iters; ++it) {
    double t0 = now_us();
    // A batch of completions may hold the peer's next message already: it counts for the next exchange.
    sends_left += 1;
    recvs_left += 1;
    if (cross || first) {
      struct ibv_send_wr* bad;
      buf[0] = (uint8_t)it;
      if (ibv_post_send(qp, &swr, &bad)) die("ibv_post_send");
    }
    while (sends_left > 0 || recvs_left > 0) {
      struct ibv_wc wc[4];
      int n = ibv_poll_cq(cq, 4, wc);
      if (n < 0) die("ibv_poll_cq");
      for (int k = 0; k < n; ++k) {
        if (wc[k].status != IBV_WC_SUCCESS) {
          fprintf(stderr, "verbs_exchange: completion %s\n", ibv_wc_status_str(wc[k].status));
          return 1;
        }
        if (wc[k].opcode == IBV_WC_SEND || wc[k].opcode == IBV_WC_RDMA_WRITE) {
          --sends_left;
          continue;
        }
        --recvs_left;
        int slot = (int)wc[k].wr_id;
        struct ibv_sge sg = {(uintptr_t)(buf + stride * (size_t)(slot + 1)), (uint32_t)size, mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = (uint64_t)slot, .sg_list = &sg, .num_sge = 1}, *bad;
        if (ibv_post_recv(qp, &wr, &bad)) die("ibv_post_recv");
        if (!cross && !first) {  // answer the ping
          struct ibv_send_wr* bads;
          if (ibv_post_send(qp, &swr, &bads)) die("ibv_post_send");
        }
      }
    }
    if (it >= 0) samples[it] = cross ? now_us() - t0 : (now_us() - t0) / 2;
  }
  xfer(s, &go, &got, 1);
  qsort(samples, (size_t)iters, sizeof(double), cmp_double);
  printf("%s%s %zu %ld %.2f %.2f %.2f\n", cross ? "cross" : "pingpong", write_imm ? "-write-imm" : "", size, iters, samples[0],
         samples[iters / 2], samples[iters - 1]);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  free(samples);
  free(buf);
  close(s);
  return 0;
}
