// The engine's names for the model config. config.json is read (and written)
// in one place, worker/checkpoint/model_config.h; the decoder, the executor
// and their tests spell its types as engine::ModelConfig, engine::NormKind,
// ... through these declarations. Nothing is defined here.
#pragma once

#include "worker/checkpoint/model_config.h"

namespace nightshift::engine {

using checkpoint::Activation;
using checkpoint::ConfigReader;
using checkpoint::MlpKind;
using checkpoint::ModelConfig;
using checkpoint::NormKind;
using checkpoint::ParseModelConfig;
using checkpoint::QkvLayout;
using checkpoint::RopeConfig;
using checkpoint::RopeType;

}  // namespace nightshift::engine
