// Runs SPEC.md's hand-checked example through an installed rhoscan and checks the result.
#include <cmath>
#include <cstdio>

#include <rhoscan/rhoscan.h>

int main() {
  float q[] = {2, 0, 1, 3}, v[] = {10, 20, 30, 40}, a[] = {0.5f, 0.5f};
  float context[4], rho[4], rho_norm[2];
  rhoscan::ForwardArgs args;
  args.q = rhoscan::TensorView::contiguous(q, rhoscan::DType::float32, {1, 1, 2, 2});
  args.v = rhoscan::TensorView::contiguous(v, rhoscan::DType::float32, {1, 1, 2, 2});
  args.decay = rhoscan::TensorView::contiguous(a, rhoscan::DType::float32, {1, 2});
  args.context = rhoscan::TensorView::contiguous(context, rhoscan::DType::float32, {1, 1, 2, 2});
  args.rho_out = rhoscan::TensorView::contiguous(rho, rhoscan::DType::float32, {1, 1, 2, 2});
  args.rho_norm_out = rhoscan::TensorView::contiguous(rho_norm, rhoscan::DType::float32, {1, 1, 2});
  rhoscan::forward(args);
  bool ok = context[0] == 0 && std::fabs(context[2] - 2.4999981f) < 1e-5f &&
            std::fabs(context[3] - 4.9999963f) < 1e-5f && rho[3] == 120 && rho_norm[1] == 3;
  std::printf("rhoscan %s consumer: %s\n", rhoscan::version(), ok ? "ok" : "WRONG RESULT");
  return ok ? 0 : 1;
}
