// SPDX-License-Identifier: Apache-2.0
// Data-parallel training of a 2-layer MLP with grex: every rank holds the same
// model, trains on its shard of each global batch, and the gradients are summed
// with one allreduce per step. 1 rank and N ranks follow the same loss curve
// (up to floating-point summation order).
//
//   grex-run -n 4 -- train [--steps 300] [--hidden 512] [--batch 256] [--lr 0.1]
//
// Issue 29's options: --compress bf16|fp16|int8|topk sends the gradient
// compressed (with error feedback; topk keeps 1 %); --deadline-ms D makes
// each step's allreduce a deadline allreduce (the gradient of the ranks in
// time, averaged over them; --late drop|carry for the others), and
// --delay-ms T slows the last rank by T ms every step (a straggler).
//
// The data set is synthetic and seeded: inputs are Gaussian, labels come from
// a fixed random "teacher" network, so the task is learnable but not trivial.
#include <grex/communicator.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Args {
  int steps = 300;
  int batch = 256;  // global batch; each rank takes batch / world samples
  int in = 64;
  int hidden = 512;
  int classes = 10;
  int samples = 16384;
  float lr = 0.1f;
  uint32_t seed = 1;
  int log_every = 25;
  std::string compress = "none";
  int deadline_ms = 0;
  std::string late = "drop";
  int delay_ms = 0;
};

bool parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&](auto* v) {
      if (i + 1 >= argc) return false;
      *v = static_cast<std::remove_reference_t<decltype(*v)>>(std::atof(argv[++i]));
      return true;
    };
    bool good = k == "--steps"     ? next(&a->steps)
                : k == "--batch"   ? next(&a->batch)
                : k == "--hidden"  ? next(&a->hidden)
                : k == "--samples" ? next(&a->samples)
                : k == "--lr"      ? next(&a->lr)
                : k == "--seed"    ? next(&a->seed)
                : k == "--log-every" ? next(&a->log_every)
                : k == "--deadline-ms" ? next(&a->deadline_ms)
                : k == "--delay-ms"    ? next(&a->delay_ms)
                : k == "--compress" && i + 1 < argc ? (a->compress = argv[++i], true)
                : k == "--late" && i + 1 < argc     ? (a->late = argv[++i], true)
                                                    : false;
    if (!good) {
      std::fprintf(stderr,
                   "usage: train [--steps N] [--batch N] [--hidden N] [--samples N] [--lr X] [--seed N] "
                   "[--log-every N] [--compress none|bf16|fp16|int8|topk] [--deadline-ms D] [--late drop|carry] "
                   "[--delay-ms T]\n");
      return false;
    }
  }
  if (!grex::compression_from_name(a->compress) || (a->late != "drop" && a->late != "carry")) return false;
  return a->steps > 0 && a->batch > 0 && a->hidden > 0 && a->samples >= a->batch && a->deadline_ms >= 0 &&
         a->delay_ms >= 0;
}

// The model: h = relu(W1 x + b1); logits = W2 h + b2. All parameters live in
// one flat vector so the gradient is a single allreduce.
struct Model {
  int in, hidden, classes;
  std::vector<float> p;  // [W1 | b1 | W2 | b2]
  size_t w1() const { return 0; }
  size_t b1() const { return static_cast<size_t>(in) * hidden; }
  size_t w2() const { return b1() + static_cast<size_t>(hidden); }
  size_t b2() const { return w2() + static_cast<size_t>(hidden) * classes; }
  size_t size() const { return b2() + static_cast<size_t>(classes); }
};

Model make_model(const Args& a) {
  Model m{a.in, a.hidden, a.classes, {}};
  m.p.assign(m.size(), 0.0f);
  std::mt19937 g(a.seed * 7919u + 17u);  // identical on every rank
  std::normal_distribution<float> n1(0.0f, std::sqrt(2.0f / static_cast<float>(a.in)));
  std::normal_distribution<float> n2(0.0f, std::sqrt(1.0f / static_cast<float>(a.hidden)));
  for (size_t i = m.w1(); i < m.b1(); ++i) m.p[i] = n1(g);
  for (size_t i = m.w2(); i < m.b2(); ++i) m.p[i] = n2(g);
  return m;
}

struct Dataset {
  int in = 0;
  std::vector<float> x;
  std::vector<int> y;
};

// Labels from a random teacher: argmax(T2 tanh(T1 x)).
Dataset make_data(const Args& a) {
  Dataset d;
  d.in = a.in;
  std::mt19937 g(a.seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int th = 32;
  std::vector<float> t1(static_cast<size_t>(th) * a.in), t2(static_cast<size_t>(a.classes) * th);
  for (auto& v : t1) v = n(g);
  for (auto& v : t2) v = n(g);
  d.x.resize(static_cast<size_t>(a.samples) * a.in);
  d.y.resize(static_cast<size_t>(a.samples));
  std::vector<float> h(th);
  for (int s = 0; s < a.samples; ++s) {
    float* x = &d.x[static_cast<size_t>(s) * a.in];
    for (int i = 0; i < a.in; ++i) x[i] = n(g);
    for (int j = 0; j < th; ++j) {
      float acc = 0;
      for (int i = 0; i < a.in; ++i) acc += t1[static_cast<size_t>(j) * a.in + i] * x[i];
      h[static_cast<size_t>(j)] = std::tanh(acc / std::sqrt(static_cast<float>(a.in)));
    }
    int best = 0;
    float bv = -1e30f;
    for (int c = 0; c < a.classes; ++c) {
      float acc = 0;
      for (int j = 0; j < th; ++j) acc += t2[static_cast<size_t>(c) * th + j] * h[static_cast<size_t>(j)];
      if (acc > bv) bv = acc, best = c;
    }
    d.y[static_cast<size_t>(s)] = best;
  }
  return d;
}

// Adds the gradient of the summed cross-entropy over samples [first, first+n)
// to grad, and returns the summed loss and the number classified correctly.
double forward_backward(const Model& m, const Dataset& d, int first, int n, std::vector<float>* grad,
                        int* correct) {
  std::vector<float> h(static_cast<size_t>(m.hidden)), z(static_cast<size_t>(m.classes)),
      dh(static_cast<size_t>(m.hidden));
  double loss = 0;
  for (int s = first; s < first + n; ++s) {
    const float* x = &d.x[static_cast<size_t>(s) * m.in];
    for (int j = 0; j < m.hidden; ++j) {
      const float* w = &m.p[m.w1() + static_cast<size_t>(j) * m.in];
      float acc = m.p[m.b1() + static_cast<size_t>(j)];
      for (int i = 0; i < m.in; ++i) acc += w[i] * x[i];
      h[static_cast<size_t>(j)] = acc > 0 ? acc : 0;
    }
    float zmax = -1e30f;
    for (int c = 0; c < m.classes; ++c) {
      const float* w = &m.p[m.w2() + static_cast<size_t>(c) * m.hidden];
      float acc = m.p[m.b2() + static_cast<size_t>(c)];
      for (int j = 0; j < m.hidden; ++j) acc += w[j] * h[static_cast<size_t>(j)];
      z[static_cast<size_t>(c)] = acc;
      zmax = std::max(zmax, acc);
    }
    double sum = 0;
    for (int c = 0; c < m.classes; ++c) sum += std::exp(static_cast<double>(z[static_cast<size_t>(c)] - zmax));
    int label = d.y[static_cast<size_t>(s)];
    loss += std::log(sum) - static_cast<double>(z[static_cast<size_t>(label)] - zmax);
    if (std::max_element(z.begin(), z.end()) - z.begin() == label) ++*correct;
    // Backward: dz = softmax - onehot.
    std::fill(dh.begin(), dh.end(), 0.0f);
    for (int c = 0; c < m.classes; ++c) {
      float dz = static_cast<float>(std::exp(static_cast<double>(z[static_cast<size_t>(c)] - zmax)) / sum) -
                 (c == label ? 1.0f : 0.0f);
      float* gw = &(*grad)[m.w2() + static_cast<size_t>(c) * m.hidden];
      const float* w = &m.p[m.w2() + static_cast<size_t>(c) * m.hidden];
      for (int j = 0; j < m.hidden; ++j) {
        gw[j] += dz * h[static_cast<size_t>(j)];
        dh[static_cast<size_t>(j)] += dz * w[j];
      }
      (*grad)[m.b2() + static_cast<size_t>(c)] += dz;
    }
    for (int j = 0; j < m.hidden; ++j) {
      if (h[static_cast<size_t>(j)] <= 0) continue;
      float g = dh[static_cast<size_t>(j)];
      float* gw = &(*grad)[m.w1() + static_cast<size_t>(j) * m.in];
      for (int i = 0; i < m.in; ++i) gw[i] += g * x[i];
      (*grad)[m.b1() + static_cast<size_t>(j)] += g;
    }
  }
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, &a)) return 2;
  auto comm_r = grex::Communicator::from_env();
  if (!comm_r) {
    std::fprintf(stderr, "train: %s\n(start it with: grex-run -n 4 -- %s)\n", comm_r.error().message().c_str(),
                 argv[0]);
    return 1;
  }
  grex::Communicator& comm = **comm_r;
  const int rank = comm.rank(), world = comm.size();
  if (a.batch % world != 0) {
    if (rank == 0) std::fprintf(stderr, "train: --batch %d is not divisible by %d ranks\n", a.batch, world);
    return 2;
  }
  Model m = make_model(a);
  Dataset d = make_data(a);
  const int local = a.batch / world;
  // Gradient plus two trailing slots for the loss and the correct count: one
  // allreduce per step carries everything.
  const size_t np = m.size();
  std::vector<float> grad(np + 2);
  if (rank == 0)
    std::printf("grex train: %d ranks over %s, MLP %d-%d-%d (%zu parameters, %.2f MB of gradients per step), "
                "global batch %d\n",
                world, comm.options().backend.c_str(), a.in, a.hidden, a.classes, np,
                static_cast<double>(np * 4) / 1e6, a.batch);

  // Timing per step: compute, then a barrier (how long this rank waits for the
  // slowest one: load imbalance, not communication), then the allreduce.
  grex::AllreduceOptions ro;
  ro.compression = *grex::compression_from_name(a.compress);
  ro.error_feedback = ro.compression != grex::Compression::kNone;
  ro.deadline_ms = a.deadline_ms;
  ro.late = a.late == "carry" ? grex::LateInput::kCarry : grex::LateInput::kDrop;
  std::vector<int> contributors;
  ro.contributors = &contributors;
  double contributed = 0;  // ranks per step, summed
  double comm_s = 0, skew_s = 0, step_s_total = 0, last_loss = 0;
  const double bytes = static_cast<double>(grad.size() * sizeof(float));
  const double bus_factor = world > 1 ? 2.0 * (world - 1) / world : 0.0;
  for (int step = 0; step < a.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    int first = (step * a.batch) % (a.samples - a.batch + 1) + rank * local;
    std::fill(grad.begin(), grad.end(), 0.0f);
    int correct = 0;
    double loss = forward_backward(m, d, first, local, &grad, &correct);
    grad[np] = static_cast<float>(loss);
    grad[np + 1] = static_cast<float>(correct);
    if (a.delay_ms > 0 && rank == world - 1) std::this_thread::sleep_for(std::chrono::milliseconds(a.delay_ms));
    auto t1 = std::chrono::steady_clock::now();
    // The barrier measures how long this rank waits for the slowest; with a
    // deadline nobody waits for the slowest, so there is none.
    auto st = a.deadline_ms > 0 ? grex::Result<void>(grex::ok()) : comm.barrier();
    auto t2 = std::chrono::steady_clock::now();
    contributors.assign(static_cast<size_t>(world), 0);
    if (st) st = comm.allreduce(grad.data(), grad.data(), grad.size(), grex::DataType::kFloat32, grex::ReduceOp::kSum, ro);
    auto t3 = std::chrono::steady_clock::now();
    if (!st) {
      std::fprintf(stderr, "train: step %d: %s\n", step, st.error().message().c_str());
      return 1;
    }
    // The gradient summed over the ranks in time: average over their samples.
    const int in_time = a.deadline_ms > 0 ? static_cast<int>(contributors.size()) : world;
    contributed += in_time;
    const float scale = a.lr / static_cast<float>(local * in_time);
    for (size_t i = 0; i < np; ++i) m.p[i] -= scale * grad[i];
    skew_s += std::chrono::duration<double>(t2 - t1).count();
    comm_s += std::chrono::duration<double>(t3 - t2).count();
    step_s_total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    last_loss = grad[np] / static_cast<float>(local * in_time);
    if (rank == 0 && (step % a.log_every == 0 || step == a.steps - 1)) {
      double per = comm_s / (step + 1);
      std::printf("step %4d  loss %.6f  acc %5.1f%%  allreduce %7.1f us (algbw %.2f GB/s, busbw %.2f GB/s)  "
                  "wait for slowest rank %6.1f us  step %.2f ms\n",
                  step, last_loss, 100.0 * grad[np + 1] / (local * in_time), per * 1e6, bytes / per / 1e9,
                  bytes / per / 1e9 * bus_factor, skew_s / (step + 1) * 1e6, step_s_total / (step + 1) * 1e3);
    }
  }
  if (rank == 0) {
    std::printf("final loss %.6f after %d steps; allreduce %.1f%% of step time, waiting for other ranks %.1f%%\n",
                last_loss, a.steps, 100.0 * comm_s / step_s_total, 100.0 * skew_s / step_s_total);
    std::printf("mean step %.3f ms, %.2f of %d ranks in time per step\n", step_s_total / a.steps * 1e3,
                contributed / a.steps, world);
    // The same samples for every run, whichever ranks' gradients counted.
    const int eval_n = std::min(a.samples, 2048);
    std::vector<float> scratch(grad.size());
    int eval_correct = 0;
    const double eval = forward_backward(m, d, 0, eval_n, &scratch, &eval_correct) / eval_n;
    std::printf("eval loss %.6f  acc %5.1f%% on the first %d samples\n", eval, 100.0 * eval_correct / eval_n, eval_n);
    std::fflush(stdout);
  }
  return comm.barrier() ? 0 : 1;
}
