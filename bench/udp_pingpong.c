// SPDX-License-Identifier: Apache-2.0
// Kernel UDP ping-pong over loopback, the peer for grex's 8-byte latency:
// udp_pingpong ITERS  ->  "udp 8 <us half round trip>"
#define _DEFAULT_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int bound(unsigned short port) {
  int s = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (s < 0 || bind(s, (struct sockaddr*)&a, sizeof a) != 0) { perror("bind"); exit(1); }
  return s;
}

static void to(int s, unsigned short port, const char* b) {
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (sendto(s, b, 8, 0, (struct sockaddr*)&a, sizeof a) != 8) { perror("sendto"); exit(1); }
}

int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 20000;
  unsigned short pa = 47301, pb = 47302;
  char buf[8] = {0};
  pid_t child = fork();
  if (child == 0) {
    int s = bound(pb);
    for (int i = 0; i < iters; ++i) {
      if (recv(s, buf, sizeof buf, 0) != 8) exit(1);
      to(s, pa, buf);
    }
    exit(0);
  }
  int s = bound(pa);
  usleep(100000);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < iters; ++i) {
    to(s, pb, buf);
    if (recv(s, buf, sizeof buf, 0) != 8) return 1;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double sec = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("udp 8 %.2f\n", sec / iters / 2 * 1e6);
  waitpid(child, NULL, 0);
  return 0;
}
