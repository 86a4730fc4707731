// Runs a schedule's stage orders on paper: each stage takes its actions in order, each starting
// when the stage is free and its inputs exist (a forward needs the previous virtual stage's
// forward of that micro-batch, a backward its own forward and the next virtual stage's
// backward), transfers free and never blocking the sender. It proves a schedule free of
// deadlock (or names what waits on what), and gives the bubble and the activations each stage
// keeps, the figures the schedules are chosen by.
#pragma once

#include <vector>

#include "pipeline/schedule.h"

namespace cadre::pipeline {

struct Simulation {
  double makespan = 0;                 // the step, in the cost unit
  double bubble = 0;                   // idle share of stages x makespan
  std::vector<int64_t> peak_in_flight;  // per stage: most forwards held (their backward not yet run)
};

// `forward_cost` and `backward_cost` per action (a chunk's share of a stage's work: 1 / chunks of
// a stage's forward each, so the schedules compare at equal work). Error naming each stage's
// next action and the action it waits for when the orders deadlock.
Simulation simulate(Schedule schedule, const PipelineShape& shape, double forward_cost = 1, double backward_cost = 2);

// The same for explicit orders (one per stage): a schedule under test, or a wrong one.
Simulation simulate_orders(const std::vector<std::vector<Action>>& orders, const PipelineShape& shape,
                           double forward_cost, double backward_cost);

}  // namespace cadre::pipeline
