// Training curves as one SVG image: four panels (loss, accuracy, learning rate, images/s) over
// the epochs, each drawing every column "<loader>_<metric>" of its metric ("train_loss" and
// "valid_loss" in the loss panel). `ember report LOGDIR` writes it.
#pragma once

#include <string>

#include "engines/logged_metrics.h"

namespace ember::engines {

// `title` heads the image (the logdir, for `ember report`). Every text is escaped, and every
// coordinate is a finite number, whatever the metrics hold.
std::string training_curves_svg(const LoggedMetrics& metrics, const std::string& title);

}  // namespace ember::engines
