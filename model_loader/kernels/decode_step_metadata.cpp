#include "model_loader/kernels/decode_step_metadata.hpp"

#include <algorithm>
#include <string>

#include "protocol/errors.hpp"

namespace hotswap::model_loader::kernels {

DecodeStepMetadata::DecodeStepMetadata(std::int64_t max_rows, std::int64_t max_blocks_per_row,
                                       std::int64_t block_size, std::int32_t scratch_block)
    : max_rows_(max_rows),
      max_blocks_per_row_(max_blocks_per_row),
      block_size_(block_size),
      scratch_block_(scratch_block) {
  if (max_rows < 1 || max_blocks_per_row < 1 || block_size < 1 || scratch_block < 0) {
    throw protocol::ValueError(
        "decode step metadata needs at least one row, one block per row "
        "and a block size, and a scratch block");
  }
  const auto rows = static_cast<std::size_t>(max_rows);
  std::size_t at = 0;
  auto take = [&at](std::size_t count) {
    const std::size_t start = at;
    at += count;
    return start;
  };
  sections_.tokens = take(rows);
  sections_.positions = take(rows);
  sections_.row_of_token = take(rows);
  sections_.q_indptr = take(rows + 1);
  sections_.page_indptr = take(rows + 1);
  sections_.last_page_len = take(rows);
  sections_.page_indices = take(rows * static_cast<std::size_t>(max_blocks_per_row));
  sections_.total = at;
  image_.assign(at, 0);
}

void DecodeStepMetadata::fill(std::span<const DecodeRow> sequences, std::int64_t rows) {
  if (rows < static_cast<std::int64_t>(sequences.size()) || rows > max_rows_) {
    throw protocol::ValueError("a decode step of " + std::to_string(sequences.size()) +
                               " sequences cannot take " + std::to_string(rows) +
                               " rows (at most " + std::to_string(max_rows_) + ")");
  }
  std::int32_t* tokens = image_.data() + sections_.tokens;
  std::int32_t* positions = image_.data() + sections_.positions;
  std::int32_t* row_of_token = image_.data() + sections_.row_of_token;
  std::int32_t* q_indptr = image_.data() + sections_.q_indptr;
  std::int32_t* indptr = image_.data() + sections_.page_indptr;
  std::int32_t* last_len = image_.data() + sections_.last_page_len;
  std::int32_t* pages = image_.data() + sections_.page_indices;
  indptr[0] = 0;
  q_indptr[0] = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const bool padding = r >= static_cast<std::int64_t>(sequences.size());
    const DecodeRow pad{0, 0, std::span<const std::int32_t>(&scratch_block_, 1)};
    const DecodeRow& row = padding ? pad : sequences[static_cast<std::size_t>(r)];
    const std::int64_t used = row.position / block_size_ + 1;  // blocks holding 0 .. position
    if (row.position < 0 || static_cast<std::int64_t>(row.blocks.size()) < used ||
        used > max_blocks_per_row_) {
      throw protocol::ValueError("decode row " + std::to_string(r) + ": position " +
                                 std::to_string(row.position) + " needs " + std::to_string(used) +
                                 " blocks of " + std::to_string(block_size_) + "; it holds " +
                                 std::to_string(row.blocks.size()) + " and a row has room for " +
                                 std::to_string(max_blocks_per_row_));
    }
    tokens[r] = row.token;
    positions[r] = row.position;
    row_of_token[r] = static_cast<std::int32_t>(r);
    q_indptr[r + 1] = static_cast<std::int32_t>(r + 1);
    std::copy_n(row.blocks.begin(), used, pages + indptr[r]);
    indptr[r + 1] = indptr[r] + static_cast<std::int32_t>(used);
    last_len[r] = static_cast<std::int32_t>(row.position % block_size_ + 1);
  }
  rows_ = rows;
}

}  // namespace hotswap::model_loader::kernels
