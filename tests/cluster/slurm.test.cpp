#include <catch2/catch.hpp>

#include <cstdlib>

#include "cluster/slurm.hpp"

using namespace bb;

namespace {

using strings = std::vector<std::string>;

strings expand(const std::string& list) {
  std::string error;
  auto out = expand_nodelist(list, error);
  INFO(error);
  CHECK(error.empty());
  return out;
}

std::string expand_error(const std::string& list) {
  std::string error;
  auto out = expand_nodelist(list, error);
  CHECK(out.empty());
  return error;
}

std::map<std::string, std::string> job_env() {
  return {{"SLURM_JOB_ID", "4711"}, {"SLURM_JOB_NODELIST", "gpu[01-02]"}};
}

uint32_t gpus_with(const std::string& var, const std::string& value) {
  auto env = job_env();
  env[var] = value;
  std::string error;
  auto a = read_slurm_allocation(env, error);
  INFO(var << "=" << value << ": " << error);
  REQUIRE(a);
  return a->gpus_per_node;
}

} // namespace

TEST_CASE("node lists expand as scontrol show hostnames does", "[cluster]") {
  CHECK(expand("node[01-03,07],gpu-a[1-2],login")
        == strings{"node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2", "login"});
  CHECK(expand("login") == strings{"login"});
  CHECK(expand("a,b c") == strings{"a", "b", "c"});
  CHECK(expand("n[8-11]") == strings{"n8", "n9", "n10", "n11"});
  CHECK(expand("n[008-010]") == strings{"n008", "n009", "n010"});
  CHECK(expand("n[099-101]") == strings{"n099", "n100", "n101"});
  CHECK(expand("n[5]") == strings{"n5"});
  CHECK(expand("n[3,1]") == strings{"n3", "n1"});
  CHECK(expand("rack[1-2]-n[1-2]") == strings{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"});
  CHECK(expand("n[1-2].cluster") == strings{"n1.cluster", "n2.cluster"});
  CHECK(expand("a[1-2][7,9]") == strings{"a17", "a19", "a27", "a29"});
  CHECK(expand("node-[01-02],node-03") == strings{"node-01", "node-02", "node-03"});
  CHECK(expand("").empty());
  CHECK(expand("n[1-1000]").size() == 1000);
  CHECK(expand("n[1-1000]").back() == "n1000");
}

TEST_CASE("a malformed node list is an error naming the character", "[cluster]") {
  CHECK(expand_error("node[1-3") == "node list 'node[1-3', character 5: '[' is never closed");
  CHECK(expand_error("node1-3]") == "node list 'node1-3]', character 8: ']' without '['");
  CHECK(expand_error("n[1-[2]]") == "node list 'n[1-[2]]', character 5: '[' inside brackets");
  CHECK(expand_error("a,n[]") == "node list 'a,n[]', character 5: expected a number, found ']'");
  CHECK(expand_error("n[a-3]") == "node list 'n[a-3]', character 3: expected a number, found 'a'");
  CHECK(expand_error("n[1-]") == "node list 'n[1-]', character 5: expected a number, found ']'");
  CHECK(expand_error("n[1,]") == "node list 'n[1,]', character 5: expected a number, found ']'");
  CHECK(expand_error("n[-1]") == "node list 'n[-1]', character 3: expected a number, found '-'");
  CHECK(expand_error("n[1-2-3]")
        == "node list 'n[1-2-3]', character 6: expected ',', '-' or ']', found '-'");
  CHECK(expand_error("n[1 ,2]")
        == "node list 'n[1 ,2]', character 4: expected ',', '-' or ']', found ' '");
  CHECK(expand_error("x,n[07-03]") == "node list 'x,n[07-03]', character 5: range 07-03 goes down");
  CHECK(expand_error("n[0-2000000]")
        == "node list 'n[0-2000000]', character 3: more than 1048576 hosts");
  CHECK(expand_error("a[0-2000]b[0-2000]")
        == "node list 'a[0-2000]b[0-2000]', character 1: more than 1048576 hosts");
}

TEST_CASE("outside an allocation there is no Slurm job", "[cluster]") {
  std::string error;
  CHECK_FALSE(read_slurm_allocation({{"SLURM_JOB_NODELIST", "n1"}}, error));
  CHECK(error
        == "not inside a Slurm allocation (no SLURM_JOB_ID): run bbcluster under salloc or sbatch");
  error.clear();
  CHECK_FALSE(read_slurm_allocation({{"SLURM_JOB_ID", ""}}, error));
  CHECK(error.find("no SLURM_JOB_ID") != std::string::npos);
}

TEST_CASE("an allocation's job, nodes and GPUs", "[cluster]") {
  std::string error;
  auto a = read_slurm_allocation(job_env(), error);
  REQUIRE(a);
  CHECK(error.empty());
  CHECK(a->job_id == "4711");
  CHECK(a->nodes == strings{"gpu01", "gpu02"});
  CHECK(a->gpus_per_node == 0);

  auto old = read_slurm_allocation({{"SLURM_JOB_ID", "9"}, {"SLURM_NODELIST", "x[1-3]"}}, error);
  REQUIRE(old);
  CHECK(old->nodes == strings{"x1", "x2", "x3"});

  auto bad = read_slurm_allocation({{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NODELIST", "x[1-"}}, error);
  CHECK_FALSE(bad);
  CHECK(error == "SLURM_JOB_NODELIST: node list 'x[1-', character 2: '[' is never closed");

  CHECK_FALSE(read_slurm_allocation({{"SLURM_JOB_ID", "9"}}, error));
  CHECK(error == "Slurm job 9 names no nodes (no SLURM_JOB_NODELIST)");
}

TEST_CASE("GPUs per node from each variable, in order of preference", "[cluster]") {
  CHECK(gpus_with("SLURM_GPUS_ON_NODE", "8") == 8);
  CHECK(gpus_with("SLURM_GPUS_PER_NODE", "4") == 4);
  CHECK(gpus_with("SLURM_GPUS_PER_NODE", "gpu:4") == 4);
  CHECK(gpus_with("SLURM_GPUS_PER_NODE", "h100:3") == 3);
  CHECK(gpus_with("SLURM_GPUS_PER_NODE", "gpu:h100:2") == 2);
  CHECK(gpus_with("SLURM_JOB_GPUS", "0,1,2,3,4,5") == 6);
  CHECK(gpus_with("CUDA_VISIBLE_DEVICES", "0,1,2") == 3);
  CHECK(gpus_with("CUDA_VISIBLE_DEVICES", "GPU-8f2e,GPU-91aa") == 2);
  CHECK(gpus_with("CUDA_VISIBLE_DEVICES", "NoDevFiles") == 0);

  auto env = job_env();
  env["SLURM_GPUS_ON_NODE"] = "2";
  env["SLURM_GPUS_PER_NODE"] = "gpu:4";
  env["SLURM_JOB_GPUS"] = "0,1,2,3,4,5,6";
  env["CUDA_VISIBLE_DEVICES"] = "0";
  std::string error;
  CHECK(read_slurm_allocation(env, error)->gpus_per_node == 2);
  env.erase("SLURM_GPUS_ON_NODE");
  CHECK(read_slurm_allocation(env, error)->gpus_per_node == 4);
  env.erase("SLURM_GPUS_PER_NODE");
  CHECK(read_slurm_allocation(env, error)->gpus_per_node == 7);
  env.erase("SLURM_JOB_GPUS");
  CHECK(read_slurm_allocation(env, error)->gpus_per_node == 1);
}

TEST_CASE("a malformed GPU variable is an error naming it", "[cluster]") {
  auto env = job_env();
  env["SLURM_GPUS_PER_NODE"] = "gpu:h100";
  std::string error;
  CHECK_FALSE(read_slurm_allocation(env, error));
  CHECK(error == "SLURM_GPUS_PER_NODE is 'gpu:h100', expected N, gpu:N, TYPE:N or gpu:TYPE:N");
  env["SLURM_GPUS_ON_NODE"] = "four";
  CHECK_FALSE(read_slurm_allocation(env, error));
  CHECK(error == "SLURM_GPUS_ON_NODE is 'four', not a GPU count");
}

TEST_CASE("current_environment holds this process's variables", "[cluster]") {
  ::setenv("BB_SLURM_TEST_VAR", "a=b", 1);
  auto env = current_environment();
  CHECK(env["BB_SLURM_TEST_VAR"] == "a=b");
  CHECK(env.count("BB_SLURM_TEST_NOT_SET") == 0);
  ::unsetenv("BB_SLURM_TEST_VAR");
}
