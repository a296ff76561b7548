// Unit tests of codegen's helpers that need no model: where an installed pipec's prefix is
// (runtime_paths.c: runtime_prefix_of, from the executable's path).
#include <check.h>
#include <string.h>

#include "../../codegen/runtime_paths.h"

START_TEST(test_prefix_of) {
  char p[64];
  ck_assert(runtime_prefix_of("/opt/pipec/bin/pipec", "bin", p, sizeof p));
  ck_assert_str_eq(p, "/opt/pipec");
  // The root as the prefix (make install PREFIX=/): "" so that "/include/pipec" follows.
  ck_assert(runtime_prefix_of("/bin/pipec", "bin", p, sizeof p));
  ck_assert_str_eq(p, "");
  ck_assert(runtime_prefix_of("/usr/lib/pipec/tools/pipec", "lib/pipec/./tools", p, sizeof p));
  ck_assert_str_eq(p, "/usr");
  // Not that deep: /pipec in bin/ would need a directory above the root.
  ck_assert(!runtime_prefix_of("/pipec", "bin", p, sizeof p));
  ck_assert(!runtime_prefix_of("pipec", "", p, sizeof p));
  // Too long for the buffer.
  ck_assert(!runtime_prefix_of("/a/very/long/prefix/bin/pipec", "bin", p, 8));
}
END_TEST

int main(void) {
  Suite *s = suite_create("codegen");
  TCase *tc = tcase_create("runtime_paths");
  tcase_add_test(tc, test_prefix_of);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
