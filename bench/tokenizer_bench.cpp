// hotswap_tokenizer_bench: encode throughput (MB/s of UTF-8 text) of hotswap's tokenizer, one
// document at a time on one thread, against the `tokenizers` package on the same tokenizer.json
// and documents (bench/tokenizer_peer.py via HOTSWAP_PEER_PYTHON; without it the run says it
// skipped the peer). Each repetition times hotswap, then the peer; figures are medians with
// their range.
//
// Usage: hotswap_tokenizer_bench [--tokenizer NAME|FILE]... [--doc-bytes N]... [--reps N] [--json]
//        (NAME: one of tests/golden/tokenizer/; default gpt2, llama3, qwen2, sentencepiece;
//        --doc-bytes: the size of each document, default 1000; several sizes show whether the
//        rate holds as documents grow, 1 KB to 10 MB: linear time keeps it flat)
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "model_loader/tokenizer/tokenizer.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// At least 2 MB (and at least one document) of documents of about `doc_bytes` each: the golden
// test strings (every script and class they cover) in a rotating order, so that documents
// differ.
std::vector<std::string> make_corpus(const fs::path& golden, std::size_t doc_bytes) {
  std::ifstream in(golden);
  const auto cases = nlohmann::json::parse(in)["cases"];
  std::vector<std::string> texts;
  for (const auto& c : cases)
    texts.push_back(c["text"].get<std::string>());
  std::vector<std::string> docs;
  std::size_t total = 0, k = 0;
  while (total < (2u << 20) || docs.empty()) {
    std::string doc;
    while (doc.size() < doc_bytes) {
      doc += texts[k % texts.size()] + (k % 3 == 0 ? "\n" : " ");
      ++k;
    }
    ++k;  // a different rotation for the next document
    total += doc.size();
    docs.push_back(std::move(doc));
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> names;
  std::vector<std::size_t> sizes;
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--tokenizer" && i + 1 < argc) {
      names.push_back(argv[++i]);
    } else if (arg == "--doc-bytes" && i + 1 < argc) {
      sizes.push_back(std::stoul(argv[++i]));
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::stoi(argv[++i]);
    } else if (arg == "--json") {
      bench::json_only() = true;
    } else {
      std::cerr
          << "hotswap_tokenizer_bench: unknown argument '" << arg
          << "' (usage: hotswap_tokenizer_bench [--tokenizer NAME|FILE]... [--doc-bytes N]... "
             "[--reps N] [--json])\n";
      return 2;
    }
  }
  if (names.empty()) names = {"gpt2", "llama3", "qwen2", "sentencepiece"};
  if (sizes.empty()) sizes = {1000};
  if (bench::peer_python() == nullptr) bench::say_peer_skipped();
  for (std::size_t doc_bytes : sizes) {
    const fs::path golden_root = fs::path(HOTSWAP_GOLDEN_DIR) / "tokenizer";
    const auto docs = make_corpus(golden_root / "qwen2" / "golden.json", doc_bytes);
    std::size_t bytes = 0;
    for (const auto& d : docs)
      bytes += d.size();
    const fs::path corpus =
        fs::temp_directory_path() / ("hotswap-tokenizer-corpus-" + std::to_string(::getpid()));
    {
      std::ofstream out(corpus, std::ios::binary);
      out << nlohmann::json(docs).dump();
    }
    for (const auto& name : names) {
      const fs::path file = fs::exists(golden_root / name / "tokenizer.json")
                                ? golden_root / name / "tokenizer.json"
                                : fs::path(name);
      auto tokenizer = model_loader::Tokenizer::from_file(file);
      for (std::size_t i = 0; i < 8 && i < docs.size(); ++i)
        tokenizer.encode(docs[i]);  // warm-up
      std::vector<double> rates, peer;
      std::size_t tokens = 0;
      for (int rep = 0; rep < reps; ++rep) {
        tokens = 0;
        auto start = Clock::now();
        for (const auto& d : docs)
          tokens += tokenizer.encode(d).size();
        rates.push_back(bytes / std::chrono::duration<double>(Clock::now() - start).count() / 1e6);
        if (auto out = bench::run_peer(HOTSWAP_BENCH_DIR, "tokenizer_peer.py",
                                       {file.string(), corpus.string()});
            out && out->contains("mb_per_second")) {
          peer.push_back(out->at("mb_per_second").get<double>());
          if (out->at("tokens").get<std::size_t>() != tokens) {
            std::fprintf(stderr, "hotswap_tokenizer_bench: %s: %zu ids here, %zu from tokenizers\n",
                         name.c_str(), tokens, out->at("tokens").get<std::size_t>());
          }
        }
      }
      const std::string what =
          "tokenizer encode, " + name + ", " + std::to_string(doc_bytes) + "-byte documents";
      const nlohmann::json extra = {{"bytes", bytes},
                                    {"documents", docs.size()},
                                    {"doc_bytes", doc_bytes},
                                    {"tokens", tokens}};
      if (!peer.empty()) {
        bench::report_against_limit("tokenizer", what, rates, peer, "MB/s", "ratio_to_tokenizers",
                                    false, extra);
      } else {
        bench::report_spread("tokenizer", what, rates, "MB/s", extra);
      }
    }
    fs::remove(corpus);
  }
  return 0;
}
