// Reader for gzipped IDX files (the format of MNIST and Fashion-MNIST) and the Fashion-MNIST
// loader built on it.
//
// Every function here is blocking (file I/O plus inflate), reentrant and thread-safe: no state
// is kept between calls. Results are returned by value and owned by the caller.
//
// Failures throw gradsync::DataError whose message names the file and what is wrong with it:
// missing or unreadable file (with an install hint), not gzip-compressed, corrupt gzip stream,
// wrong magic or element type, wrong number of dimensions, a payload shorter or longer than the
// header's dimensions, images and labels of different counts, labels out of range.
// Memory use is bounded by the data actually present: a header claiming more than
// kMaxIdxPayloadBytes is refused, and the payload buffer grows only as bytes are inflated, so a
// corrupt header cannot trigger a huge allocation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/image_set.h"

namespace gradsync {

// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// Largest payload (product of the dimensions, in bytes) the reader accepts: 1 GiB, ~20x the
// Fashion-MNIST training images.
inline constexpr uint64_t kMaxIdxPayloadBytes = uint64_t{1} << 30;
// Hint attached to a missing dataset file.
inline constexpr const char* kFashionMnistInstallHint =
    "install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or pass "
    "--data-dir";

// One IDX array of unsigned bytes: dims from the header, data row-major, exactly the product
// of dims bytes long.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

// Reads the gzip-compressed IDX file at `path`, which must hold unsigned bytes (type 0x08) in
// exactly `expectedDims` dimensions (magic 0x000008NN with NN == expectedDims).
IdxArray readIdxGz(const std::string& path, int expectedDims);

// Reads an image file (magic 0x00000803: count, rows, cols; rows and cols >= 1) and a label
// file (magic 0x00000801: count) of the same count whose labels are all < numClasses.
// numClasses must be in [1, 256] (ConfigError otherwise).
ImageSet readImageSet(const std::string& imagesGz, const std::string& labelsGz,
                      int numClasses = kFashionMnistClasses);

// The path of a Fashion-MNIST file in `dir`: {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz.
std::string fashionMnistPath(const std::string& dir, bool train, bool images);

// Loads the training (60,000 images) or test (10,000 images) split from `dir`.
// The training split takes ~0.3 s of CPU, mostly inflate (see docs/data.md).
ImageSet loadFashionMnist(const std::string& dir = kFashionMnistDir, bool train = true);

}  // namespace gradsync
