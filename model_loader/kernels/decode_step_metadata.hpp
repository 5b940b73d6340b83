// DecodeStepMetadata: the host image of what a decode step's kernels read besides the weights and
// the cache (each row's token, position and pages), laid out once for the largest batch, so that
// one asynchronous copy from pinned memory moves a whole step's metadata and every section sits
// at the same device address at every step (a CUDA graph captured over it stays valid).
//
// Row r of a step of `rows` rows is sequence r for r < sequences and padding after: a padding
// row decodes token 0 at position 0 of the scratch block (a block the KV pool never hands to a
// sequence), so its attention reads one position, its KV append writes only there, and its
// logits are dropped. The sections are FlashInfer's decode and append arguments (NHD pages,
// int32): page_indptr [rows + 1], page_indices [rows * max_blocks_per_row] (each row's pages at
// page_indptr[r] ..), last_page_len [rows], tokens, positions and row_of_token [rows] (a decode
// appends one token per row), and q_indptr [rows + 1] (0, 1, .. rows: for group sizes the decode
// kernel lacks, the prefill kernel runs the decode).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace hotswap::model_loader::kernels {

// One sequence's row of a decode step: the token it feeds, that token's position, and the KV
// blocks holding positions 0 .. position (the last one included).
struct DecodeRow {
  std::int32_t token = 0;
  std::int32_t position = 0;
  std::span<const std::int32_t> blocks;
};

class DecodeStepMetadata {
 public:
  // Where each section starts in the image, in int32 elements; fixed by the capacity.
  struct Sections {
    std::size_t tokens, positions, row_of_token, q_indptr, page_indptr, last_page_len, page_indices,
        total;
  };

  // For steps of up to `max_rows` rows whose sequences hold up to `max_blocks_per_row` blocks of
  // `block_size` positions; padding rows use `scratch_block`.
  DecodeStepMetadata(std::int64_t max_rows, std::int64_t max_blocks_per_row,
                     std::int64_t block_size, std::int32_t scratch_block);

  // Lays out `sequences` then padding up to `rows` rows (sequences.size() <= rows <= max_rows).
  // A ValueError names a row whose blocks do not hold its position, or more blocks than a row
  // has room for.
  void fill(std::span<const DecodeRow> sequences, std::int64_t rows);

  const Sections& sections() const { return sections_; }
  std::int64_t rows() const { return rows_; }
  // The whole image: copy it as one block (its size is fixed, whatever `rows`).
  std::span<const std::int32_t> image() const { return image_; }
  std::span<const std::int32_t> section(std::size_t start, std::size_t count) const {
    return std::span<const std::int32_t>(image_).subspan(start, count);
  }

 private:
  std::int64_t max_rows_, max_blocks_per_row_, block_size_;
  std::int32_t scratch_block_;
  Sections sections_{};
  std::vector<std::int32_t> image_;
  std::int64_t rows_ = 0;
};

}  // namespace hotswap::model_loader::kernels
