// SPDX-License-Identifier: Apache-2.0
// main() of the suites whose device may be absent (verbs, conformance):
// GoogleTest's, except that a run in which every selected case skipped (no
// rdma-core, no RDMA device, a driver not built) exits 77, so meson
// reports the test as SKIP rather than OK; the XML report still lists each
// skipped case with its reason.
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  const auto* u = ::testing::UnitTest::GetInstance();
  if (rc == 0 && u->test_to_run_count() > 0 && u->skipped_test_count() == u->test_to_run_count()) {
    std::printf("every case skipped: exit status 77 (skip)\n");
    return 77;
  }
  return rc;
}
