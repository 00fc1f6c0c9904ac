// Factories of the compression methods, one per file in this folder (the registry's rows).
#pragma once

#include "compress/registry.h"

namespace gradsync::methods {

std::unique_ptr<Compressor> makeFp16(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeInt8(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeTopK(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeMsTopK(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeHiTopK(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeGTopK(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeRandomK(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeDgc(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeQsgd(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeDemo(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeSparseLoCo(const MethodArgs& args,
                                           std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeRtn(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeTernGrad(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeTwoBit(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeOneBit(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeSignSgd(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makePowerSgd(const MethodArgs& args, std::span<const TensorShape> unit);
std::unique_ptr<Compressor> makeGradiVeQ(const MethodArgs& args, std::span<const TensorShape> unit);

}  // namespace gradsync::methods
