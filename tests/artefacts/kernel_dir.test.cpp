#include <catch2/catch.hpp>

#include <filesystem>
#include <set>

#include "artefacts/kernel_dir.hpp"
#include "suite/ops.hpp"
#include "artefacts/sha256.hpp"
#include "suite/traces.hpp"
#include "support.hpp"

using namespace bb;

TEST_CASE("SHA-256 of the standard test vectors", "[artefacts]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")
        == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a'))
        == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("folder names convert both ways as BackendBench's do", "[artefacts]") {
  CHECK(ops::op_name_to_folder_name("add.Tensor") == "add__Tensor");
  CHECK(ops::op_name_to_folder_name("aten.add_.Tensor") == "add___Tensor");
  CHECK(ops::op_name_to_folder_name("nn.functional.relu") == "nn__functional__relu");
  CHECK(ops::op_name_to_folder_name("_native_batch_norm") == "_native_batch_norm");
  CHECK(ops::folder_name_to_op_name("add__Tensor") == "add.Tensor");
  CHECK(ops::folder_name_to_op_name("add___Tensor") == "add_.Tensor");
  CHECK(ops::folder_name_to_op_name("nn__functional__relu") == "nn.functional.relu");
  CHECK(ops::folder_name_to_op_name("_native_batch_norm") == "_native_batch_norm");
  CHECK(ops::folder_name_to_aten_name("relu") == "aten.relu.default");
  CHECK(ops::folder_name_to_aten_name("_log_softmax_backward_data__default")
        == "aten._log_softmax_backward_data.default");
}

TEST_CASE("folder names round-trip for every operator of the shared traces", "[artefacts]") {
  auto report = traces::load(BB_TRACES_DIR);
  std::set<std::string> names;
  for (auto& op : report.loaded.ops)
    names.insert(op.op_name);
  for (auto& s : report.skipped)
    names.insert(s.substr(0, s.find(':')));
  REQUIRE(names.size() > 150);
  for (auto& name : names) {
    auto folder = ops::op_name_to_folder_name(name);
    INFO(name << " -> " << folder);
    CHECK(folder.find('.') == std::string::npos);
    CHECK("aten." + ops::folder_name_to_op_name(folder) == name);
    CHECK(ops::folder_name_to_aten_name(folder) == name);
  }
}

TEST_CASE("scanning a kernel directory: first file in sorted order, problems named", "[artefacts]") {
  bb::test::temp_dir dir;
  namespace fs = std::filesystem;
  for (auto f : {"relu__default", "add___Tensor", "empty__default", "tanh__default", "sin"})
    fs::create_directories(dir / f);
  bb::test::write_file(dir / "relu__default/relu__default_implementation_v2.py",
                       "def relu__default_kernel_impl(x):\n    return x.relu()\n");
  bb::test::write_file(dir / "relu__default/relu__default_implementation_v1.cpp",
                       "#include <bbcluster/kernel.h>\nat::Tensor relu__default_kernel_impl(const at::Tensor& x);\n"
                       "BBCLUSTER_EXPORT_KERNEL(relu__default_kernel_impl)\n");
  bb::test::write_file(dir / "relu__default/notes.txt", "not a kernel");
  bb::test::write_file(dir / "add___Tensor/add___Tensor_implementation_v1.py",
                       "import torch\ndef add___Tensor_kernel_impl(a, b, alpha=1):\n    return a.add_(b)\n");
  bb::test::write_file(dir / "tanh__default/tanh__default_implementation_v1.py",
                       "def tanh_kernel(x):\n    return x.tanh()\n");
  bb::test::write_file(dir / "sin/sin_implementation_v1.py", "sin_kernel_impl = lambda x: x.sin()\n");
  auto scan = scan_kernel_dir(dir.path);
  REQUIRE(scan.fatal.empty());
  REQUIRE(scan.kernels.size() == 3);
  CHECK(scan.kernels[0].op_name == "aten.add_.Tensor");
  CHECK(scan.kernels[1].op_name == "aten.relu.default");
  CHECK(scan.kernels[1].kernel.kind == kernel_kind::cpp);
  CHECK(scan.kernels[1].kernel.entry == "relu__default_kernel_impl");
  CHECK(scan.kernels[1].kernel.hash == sha256_hex(scan.kernels[1].kernel.source));
  CHECK(scan.kernels[2].op_name == "aten.sin.default");
  REQUIRE(scan.problems.size() == 2);
  CHECK(scan.problems[0] == dir / "empty__default" + ": no implementation file (expected "
                              "empty__default_implementation_v<N>.{py,cpp,cu})");
  CHECK(scan.problems[1] == dir / "tanh__default/tanh__default_implementation_v1.py"
                              + ": no function named tanh__default_kernel_impl (the entry point)");
  CHECK(scan_kernel_dir(dir / "missing").fatal.find("no such folder") != std::string::npos);
}
