//===- Importers.h - Per-format checkpoint importers ------------*- C++ -*-===//
//
// The format-specific entry points behind importModel(), exposed for tools
// and tests that need one format or only a tokenizer. All of them return
// errors that name the file, the byte offset or field and what was expected.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECTS_KILN_IMPORT_IMPORTERS_H
#define KILN_DIALECTS_KILN_IMPORT_IMPORTERS_H

#include "dialects/Kiln/Import/ModelDesc.h"

namespace mlir::kiln {

/// llama2.c checkpoint (legacy version-0 layout): 7 x int32 header, then f32
/// weights. `tokenizer` as for importModel().
llvm::Expected<ModelDesc> importLlama2c(llvm::StringRef path,
                                        llvm::StringRef tokenizer = "");

/// GGUF v2/v3 file with `general.architecture` = `llama`. Without an explicit
/// `tokenizer`, the tokenizer comes from the `tokenizer.ggml.*` keys (an
/// error if there are none). Tensor offsets must be multiples of
/// `general.alignment` and the tensors' data packed without overlaps.
/// Tensors may be F32, F16, BF16, Q8_0 or Q4_0; Q4_0 linears are kept
/// quantized (Prequantized.h), other quantized tensors are dequantized.
llvm::Expected<ModelDesc> importGguf(llvm::StringRef path,
                                     llvm::StringRef tokenizer = "");

/// Hugging Face directory: config.json (LlamaForCausalLM) + *.safetensors
/// (optionally model.safetensors.index.json). Without an explicit
/// `tokenizer`, reads tokenizer.json, else tokenizer.model, beside it; if
/// neither exists that is an error. A tokenizer with fewer pieces than
/// vocab_size is padded with "<pad_ID>" control pieces. GPTQ / AWQ
/// checkpoints (config.json `quantization_config`) keep their linears
/// quantized (Prequantized.h).
llvm::Expected<ModelDesc> importHuggingFace(llvm::StringRef dir,
                                            llvm::StringRef tokenizer = "");

/// `shape` is what follows "synthetic:": llama-2-7b, llama-2-13b,
/// llama-110m or stories260k.
llvm::Expected<ModelDesc> importSynthetic(llvm::StringRef shape);

/// Reads a tokenizer from any supported file, chosen by name and contents:
/// a Hugging Face `tokenizer.json` (or a directory holding one), a GGUF file,
/// a SentencePiece `*.model`, or a llama2.c `tok*.bin`.
llvm::Expected<TokenizerDesc> readTokenizer(llvm::StringRef path);

/// llama2.c `tokenizer.bin` / `tok*.bin`, normalised to SentencePiece
/// conventions ("▁", "<s>", "</s>", piece types).
llvm::Expected<TokenizerDesc> readLlama2cTokenizer(llvm::StringRef path);

/// Hugging Face `tokenizer.json` (BPE model). bos/eos ids come from
/// tokenizer_config.json or config.json beside it when present.
llvm::Expected<TokenizerDesc> readHfTokenizer(llvm::StringRef path);

/// The `tokenizer.ggml.*` keys of a GGUF file.
llvm::Expected<TokenizerDesc> readGgufTokenizer(llvm::StringRef path);

/// SentencePiece ModelProto (`tokenizer.model`).
llvm::Expected<TokenizerDesc> readSentencePieceModel(llvm::StringRef path);

/// The placeholder vocabulary of synthetic models: 0 <unk>, 1 <s>, 2 </s>,
/// 3..258 byte pieces <0x00>..<0xFF>, then "<tok_N>" user pieces.
TokenizerDesc makeSyntheticTokenizer(int64_t vocabSize);

} // namespace mlir::kiln

#endif // KILN_DIALECTS_KILN_IMPORT_IMPORTERS_H
