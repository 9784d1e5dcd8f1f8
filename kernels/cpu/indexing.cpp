#include "kernels/cpu/indexing.h"

#include <omp.h>

#include <algorithm>

#include "kernels/common/convert.h"
#include "kernels/common/scalar_types.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {

template <typename T, typename I>
void gather(const IndexIteration& it, T* out, const IndexedOperand& out_at, const T* x,
            const IndexedOperand& x_at, const I* index, const IndexedOperand& index_at) {
  const int64_t rows = it.outer * it.along;
  const int threads = threads_for(rows * it.inner);
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t o = row / it.along, j = row % it.along;
    T* out_row = out + out_at.outer_offsets[o] + j * out_at.along_stride;
    const I* index_row = index + index_at.outer_offsets[o] + j * index_at.along_stride;
    const T* x_outer = x + x_at.outer_offsets[o];
    if (out_at.inner_step == 1 && x_at.inner_step == 1 && index_at.inner_step == 0) {
      // index_select / embedding rows: one index per row, a dense copy.
      const T* x_row = x_outer + static_cast<int64_t>(index_row[0]) * x_at.along_stride;
      for (int64_t i = 0; i < it.inner; ++i)
        out_row[i] = x_row[i];
      continue;
    }
    for (int64_t i = 0; i < it.inner; ++i) {
      const int64_t position = static_cast<int64_t>(index_row[index_at.inner_offsets[i]]);
      out_row[out_at.inner_offsets[i]] =
          x_outer[position * x_at.along_stride + x_at.inner_offsets[i]];
    }
  }
}

template <typename T, typename I>
void scatter_add(const IndexIteration& it, T* out, const IndexedOperand& out_at, const T* src,
                 const IndexedOperand& src_at, const I* index, const IndexedOperand& index_at) {
  // Distinct (o, i) pairs never write the same output element, so threads split o (or, when
  // there are few outer positions, i) and each walks j in order.
  const int threads = threads_for(it.outer * it.along * it.inner);
  const bool split_outer = it.outer >= it.inner;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t extent = split_outer ? it.outer : it.inner;
    const int64_t chunk = (extent + nt - 1) / nt;
    const int64_t begin = std::min<int64_t>(extent, chunk * t);
    const int64_t end = std::min<int64_t>(extent, begin + chunk);
    const int64_t o_begin = split_outer ? begin : 0, o_end = split_outer ? end : it.outer;
    const int64_t i_begin = split_outer ? 0 : begin, i_end = split_outer ? it.inner : end;
    for (int64_t o = o_begin; o < o_end; ++o) {
      T* out_outer = out + out_at.outer_offsets[o];
      for (int64_t j = 0; j < it.along; ++j) {
        const T* src_row = src + src_at.outer_offsets[o] + j * src_at.along_stride;
        const I* index_row = index + index_at.outer_offsets[o] + j * index_at.along_stride;
        if (out_at.inner_step == 1 && src_at.inner_step == 1 && index_at.inner_step == 0) {
          // The adjoint of index_select / embedding: add a dense row.
          T* out_row = out_outer + static_cast<int64_t>(index_row[0]) * out_at.along_stride;
          for (int64_t i = i_begin; i < i_end; ++i)
            out_row[i] =
                convert<T>(static_cast<acc_t<T>>(out_row[i]) + static_cast<acc_t<T>>(src_row[i]));
          continue;
        }
        for (int64_t i = i_begin; i < i_end; ++i) {
          const int64_t position = static_cast<int64_t>(index_row[index_at.inner_offsets[i]]);
          T& slot = out_outer[position * out_at.along_stride + out_at.inner_offsets[i]];
          slot = convert<T>(static_cast<acc_t<T>>(slot) +
                            static_cast<acc_t<T>>(src_row[src_at.inner_offsets[i]]));
        }
      }
    }
  }
}

template <typename I>
int64_t first_out_of_range(const I* index, int64_t count, int64_t limit) {
  for (int64_t k = 0; k < count; ++k) {
    const int64_t value = static_cast<int64_t>(index[k]);
    if (value < 0 || value >= limit) return k;
  }
  return -1;
}

#define EMBER_INSTANTIATE_GATHER(T, I)                                                   \
  template void gather<T, I>(const IndexIteration&, T*, const IndexedOperand&, const T*, \
                             const IndexedOperand&, const I*, const IndexedOperand&);
#define EMBER_INSTANTIATE_SCATTER(T, I)                                                       \
  template void scatter_add<T, I>(const IndexIteration&, T*, const IndexedOperand&, const T*, \
                                  const IndexedOperand&, const I*, const IndexedOperand&);
#define EMBER_INSTANTIATE_ALL(T)       \
  EMBER_INSTANTIATE_GATHER(T, int32_t) \
  EMBER_INSTANTIATE_GATHER(T, int64_t)
#define EMBER_INSTANTIATE_NUMERIC(T)    \
  EMBER_INSTANTIATE_ALL(T)              \
  EMBER_INSTANTIATE_SCATTER(T, int32_t) \
  EMBER_INSTANTIATE_SCATTER(T, int64_t)
EMBER_FOR_EACH_NUMERIC_TYPE(EMBER_INSTANTIATE_NUMERIC)
EMBER_INSTANTIATE_ALL(bool)
#undef EMBER_INSTANTIATE_NUMERIC
#undef EMBER_INSTANTIATE_ALL
#undef EMBER_INSTANTIATE_SCATTER
#undef EMBER_INSTANTIATE_GATHER

template int64_t first_out_of_range<int32_t>(const int32_t*, int64_t, int64_t);
template int64_t first_out_of_range<int64_t>(const int64_t*, int64_t, int64_t);

}  // namespace ember::kernels::cpu
