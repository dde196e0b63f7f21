#include <catch2/catch.hpp>

#include "cluster/curve_keys.hpp"
#include "support.hpp"

using namespace bb;

TEST_CASE("CURVE keys: made, read back, and the files a folder already holds", "[cluster]") {
  bb::test::temp_dir dir;
  auto keys = dir / "keys";
  CHECK(existing_curve_key_files(keys).empty());
  REQUIRE(generate_curve_keys(keys) == "");
  CHECK(existing_curve_key_files(keys)
        == std::vector<std::string>{keys + "/coordinator.key", keys + "/coordinator.pub",
                                    keys + "/node.key", keys + "/node.pub"});
  curve_keypair node, node_pub;
  REQUIRE(read_curve_keys(keys + "/node.key", node) == "");
  REQUIRE(read_curve_keys(keys + "/node.pub", node_pub) == "");
  CHECK(node.public_key.size() == 40);
  CHECK(node.secret_key.size() == 40);
  CHECK(node_pub.public_key == node.public_key);
  CHECK(node_pub.secret_key.empty());

  bb::test::temp_dir other;
  bb::test::write_file(other / "node.pub", "public-key: x\n");
  CHECK(existing_curve_key_files(other.path) == std::vector<std::string>{other / "node.pub"});
}
