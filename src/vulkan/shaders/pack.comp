#version 450
// Moves a tensor between the caller's device memory (a Vulkan tensor, any strides) and a packed
// float32 work buffer, on the device: the counterpart of the host packing in transfer.cpp.
// Work element (i, x, y) of the group's row i is work[poff + i * prow + x * Y + y]; user element
// at(b, h, x, y) = base + b * sb + h * sh + x * sx + y * sy with (b, h) = divmod(bh0 + i, H).
//   mode 0 (load):  work(i, x, y) = user(b, h, x, y)
//   mode 1 (store): user(b, h, x, y) = work(i, x, y)
//   mode 2 (store summing heads, for dv when Hv = 1): for each batch b of the group's rows,
//           user(b, 0, x, y) = (the group holds head 0 of b ? 0 : user(b, 0, x, y))
//                              + sum over the group's rows of batch b, in order, of work(i, x, y)
// One workgroup per (row, x), its invocations along y (consecutive addresses when sy = 1).
// Indices are computed modulo 2^32, which is exact: the host binds a window of the user's buffer
// (< 4 GiB) that holds every element the view reaches.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
  uint g, X, Y, H, bh0, sb, sh, sx, sy, base, mode, total, prow, poff;
} pc;
layout(std430, binding = 0) buffer Ub { float user[]; };
layout(std430, binding = 1) buffer Wb { float work[]; };

void main() {
  uint group = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;  // linear (host splits x, y)
  if (group >= pc.total) return;  // total = rows * X
  uint i = group / pc.X, x = group - i * pc.X;
  if (pc.mode == 2u) {
    uint b = pc.bh0 / pc.H + i, lo = max(b * pc.H, pc.bh0), hi = min((b + 1u) * pc.H, pc.bh0 + pc.g);
    uint row = pc.base + b * pc.sb + x * pc.sx;
    for (uint y = gl_LocalInvocationID.x; y < pc.Y; y += 256u) {
      uint at = row + y * pc.sy;
      float acc = lo == b * pc.H ? 0.0 : user[at];
      for (uint r = lo; r < hi; ++r) acc += work[pc.poff + (r - pc.bh0) * pc.prow + x * pc.Y + y];
      user[at] = acc;
    }
    return;
  }
  uint bh = pc.bh0 + i, b = bh / pc.H, h = bh - b * pc.H;
  uint row = pc.base + b * pc.sb + h * pc.sh + x * pc.sx, w = pc.poff + i * pc.prow + x * pc.Y;
  if (pc.mode == 0u) {
    for (uint y = gl_LocalInvocationID.x; y < pc.Y; y += 256u) work[w + y] = user[row + y * pc.sy];
  } else {
    for (uint y = gl_LocalInvocationID.x; y < pc.Y; y += 256u) user[row + y * pc.sy] = work[w + y];
  }
}
