#!/usr/bin/env bash
# The commands behind every number published in README.md, experiments/results/*.md and
# experiments/benchmarks/*.md, one block per family. Each block names the page and the numbers it
# reproduces. Every run goes through `python -m experiments.train` (`--config.seeds=0,1,2` trains
# the seeds side by side in one program); the tables come from readers of the run directories
# (`experiments.summarize`, `safety_table`, `ogbench_curves`, `token_game_curves`).
#
# Run from the repository root with the project's venv active (`make venv`). This file is a list of
# commands to copy, not a script to run end to end: the whole list is days of CPU time.
set -euo pipefail

# ---- flat baseline and options (agents `ppo`, `option_critic`; losses `policy_gradient`, `options`)

# PPO on CartPole-v1 with PureJaxRL's config, seeds 0-4 in one program (README): mean return
# 500.0 over the last 10% of updates and at the greedy evaluation, every seed.
python -m experiments.train --config=experiments/configs/ppo_cartpole.py \
    --workdir=runs/ppo_cartpole --config.seeds=0,1,2,3,4
python -m experiments.summarize runs/ppo_cartpole --metric=episode_return --last=0.1

# DQN and Double DQN on CartPole-v1 with PureJaxRL's DQN config, 5e5 steps, seeds 0-2 in one
# program each (experiments/results/VALUE_BASED.md): mean return over the last 10% of updates
# 363.5 / 496.6 / 457.5 (DQN) and 498.2 / 492.4 / 485.1 (Double DQN); greedy evaluation
# 305.3 / 500 / 368.5 and 500 / 500 / 499.
python -m experiments.train --config=experiments/configs/dqn_cartpole.py \
    --workdir=runs/dqn_cartpole --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/dqn_cartpole.py \
    --workdir=runs/double_dqn_cartpole --config.seeds=0,1,2 --config.double_q=True
python -m experiments.summarize runs/dqn_cartpole runs/double_dqn_cartpole \
    --metric=episode_return --last=0.1

# VDN and QMIX (the qmix agent) on JaxMARL's MPE simple_spread (`pip install 'hrljax[marl]'`),
# 4e5 steps, seeds 0-2 in one program each (experiments/results/MULTIAGENT.md): team return over
# the last 10% of updates -43.5 / -44.0 / -42.1 (VDN), -44.9 / -53.8 / -62.2 (QMIX),
# -41.4 / -38.1 / -35.9 (VDN, Adam 1e-3); a random team -78.5.
python -m experiments.train --config=experiments/configs/qmix_simple_spread.py \
    --workdir=runs/marl/qmix_simple_spread --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/qmix_simple_spread.py \
    --workdir=runs/marl/vdn_simple_spread_lr5e-4 --config.mixer=vdn --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/qmix_simple_spread.py \
    --workdir=runs/marl/vdn_simple_spread --config.mixer=vdn --config.learning_rate=1e-3 \
    --config.seeds=0,1,2
python -m experiments.summarize runs/marl/vdn_simple_spread_lr5e-4 runs/marl/qmix_simple_spread \
    runs/marl/vdn_simple_spread --metric=episode_return --last=0.1

# GMAH on the two-agent four rooms, seeds 0-2 (experiments/results/MULTIAGENT.md): training
# success at 120k-160k steps 0.997 with and without the mixer, flat QMIX 0.24 (one seed of three).
python -m experiments.train --config=experiments/configs/gmah_two_agent_rooms.py \
    --workdir=runs/gmah_rooms3/gmah_qmix --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/gmah_two_agent_rooms.py \
    --workdir=runs/gmah_rooms3/gmah_none --config.seeds=0,1,2 --config.mixer=none
python -m experiments.train --config=experiments/configs/qmix_simple_spread.py \
    --workdir=runs/gmah_rooms3/flat_qmix --config.seeds=0,1,2 \
    --config.env_name=TwoAgentFourRooms-v0 --config.total_timesteps=1000000 \
    --config.gamma=0.99 --config.eval_every=5000
python -m experiments.train --config=experiments/configs/gmah_two_agent_rooms_split.py \
    --workdir=runs/gmah_split/gmah_qmix --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/gmah_two_agent_rooms_split.py \
    --workdir=runs/gmah_split/gmah_none --config.seeds=0,1,2 --config.mixer=none
for window in 40000:80000 80000:120000 120000:160000 400000:480000 900000:1000000; do
  python -m experiments.summarize runs/gmah_rooms3/gmah_qmix runs/gmah_rooms3/gmah_none \
      runs/gmah_rooms3/flat_qmix --metric=episode_return --steps="$window" --eval=none
done

# GMAH (the gmah agent) on the same task and budget, seeds 0-2 (experiments/results/MULTIAGENT.md):
# team return over the last 10% of updates -35.1 (QMIX mixer), -35.0 (VDN mixer), -34.6 (no mixer,
# the ablation) against flat VDN's -43.2; above -43.2 on every seed from 120k steps on.
python -m experiments.train --config=experiments/configs/gmah_simple_spread.py \
    --workdir=runs/gmah_ss --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/gmah_simple_spread.py \
    --workdir=runs/gmah_ss_vdn --config.mixer=vdn --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/gmah_simple_spread.py \
    --workdir=runs/gmah_ss_none --config.mixer=none --config.seeds=0,1,2
for window in 40000:80000 80000:120000 120000:160000 200000:240000; do
  python -m experiments.summarize runs/marl/vdn_simple_spread_lr5e-4 runs/marl/qmix_simple_spread \
      runs/gmah_ss runs/gmah_ss_vdn runs/gmah_ss_none --metric=episode_return --steps="$window" \
      --eval=none
done
python -m experiments.summarize runs/marl/vdn_simple_spread_lr5e-4 runs/marl/qmix_simple_spread \
    runs/gmah_ss runs/gmah_ss_vdn runs/gmah_ss_none --metric=episode_return --last=0.1 \
    --eval=eval_return
# IPPO (the ippo agent, JaxMARL's IPPO settings for MPE) against QMIX at 4e5 steps, seeds 0-2
# (experiments/results/MULTIAGENT.md): team return over the last 10% of updates -66.0 (IPPO),
# -53.6 (QMIX), -58.1 (IPPO, Adam 1e-3), -64.8 (IPPO, γ 0.95), -63.3 (IPPO, clip 10); IPPO over
# 2e6 steps -58.8.
python -m experiments.train --config=experiments/configs/qmix_simple_spread.py \
    --workdir=runs/ippo_study/qmix --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/ippo_simple_spread.py \
    --workdir=runs/ippo_study/ippo --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/ippo_simple_spread.py \
    --workdir=runs/ippo_study/ippo_gamma0.95 --config.gamma=0.95 --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/ippo_simple_spread.py \
    --workdir=runs/ippo_study/ippo_clip10 --config.max_grad_norm=10.0 --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/ippo_simple_spread.py \
    --workdir=runs/ippo_study/ippo_lr1e-3 --config.learning_rate=1e-3 --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/ippo_simple_spread.py \
    --workdir=runs/ippo_study/ippo_2m --config.total_timesteps=2000000 --config.seeds=0,1,2
python -m experiments.summarize runs/ippo_study/qmix runs/ippo_study/ippo \
    runs/ippo_study/ippo_gamma0.95 runs/ippo_study/ippo_clip10 runs/ippo_study/ippo_lr1e-3 \
    runs/ippo_study/ippo_2m --metric=episode_return --last=0.1 --eval=eval_return --statistic=iqm
for window in 0:40000 120000:160000 360000:400000; do
  python -m experiments.summarize runs/ippo_study/qmix runs/ippo_study/ippo \
      runs/ippo_study/ippo_lr1e-3 runs/ippo_study/ippo_2m --metric=episode_return \
      --steps="$window" --eval=none --statistic=iqm
done
# GMAH when sharing a goal room ends the episode (MULTIAGENT.md), seeds 0-5: greedy success at
# 160k steps 0.512 with the mixer against 0.305 without; flat QMIX 0.119 at 400k (seeds 0-2).
SHARED="--config.env_kwargs.observe_others=False --config.env_kwargs.shared_room_ends=True \
    --config.eval_episodes=256 --config.eval_every=2500"
for arm in qmix none; do
  python -m experiments.train --config=experiments/configs/gmah_two_agent_rooms_random_split.py \
      --workdir=runs/gmah_shared/$arm --config.seeds=0,1,2 --config.mixer=$arm $SHARED
  python -m experiments.train --config=experiments/configs/gmah_two_agent_rooms_random_split.py \
      --workdir=runs/gmah_shared/${arm}_s345 --config.seeds=3,4,5 --config.mixer=$arm $SHARED
done
python -m experiments.train --config=experiments/configs/qmix_two_agent_rooms_random_split.py \
    --workdir=runs/gmah_shared/flat_qmix --config.seeds=0,1,2 $SHARED
# The subgoals of one greedy episode of a trained team (MULTIAGENT.md, "What the hierarchy does").
python -m experiments.train --config=experiments/configs/gmah_simple_spread.py \
    --workdir=runs/gmah_pic --config.seeds=0
python -m experiments.plot_subgoals runs/gmah_pic --episode_seed=0

# Option-critic on four rooms, the flagship run (README, experiments/results/OPTIONS.md): 12.3
# steps to the goal at evaluation, mean option duration 5.9.
make run

# Four rooms with the goal moving after 600k of 1.2M steps, seeds 0-2, one run per seed with its
# own moved goal (experiments/results/OPTIONS.md): steps per episode in the first 60k steps
# after the move, option-critic 41.4 / 31.5 / 27.4 vs PPO 117.7 / 102.0 / 115.3; last 60k
# 19.2 / 19.3 / 18.6 vs 23.1 / 18.9 / 22.2.
for s in 0 1 2; do
  for a in option_critic_fourrooms ppo_fourrooms; do
    python -m experiments.train --config=experiments/configs/$a.py \
        --workdir=runs/transfer/${a}_s$s --config.seeds=$s --config.env_kwargs.transfer_seed=$s \
        --config.total_timesteps=1200000 --config.transfer_after=600000
  done
done
for w in 540000:600000 600000:660000 1140000:1200000; do
  python -m experiments.summarize runs/transfer/option_critic_fourrooms_s{0,1,2} \
      --metric=episode_length --steps=$w --eval=eval_length
  python -m experiments.summarize runs/transfer/ppo_fourrooms_s{0,1,2} \
      --metric=episode_length --steps=$w --eval=eval_length
done

# Option-critic (4 options, and 1 option as an ablation) vs PPO on MiniGrid DoorKey-5x5 (xminigrid,
# `pip install 'hrljax[gridworld]'`), seeds 0-2 in one program each (experiments/results/
# GRIDWORLD.md): environment steps to a training return of 0.9, PPO 51,200 / 61,440 / 61,440,
# option-critic 844,800 / 1,401,600 / 940,800, one option 320,000 / 377,600 / 332,800; IQM of the
# training return over the last 10%, 0.963 / 0.937 / 0.938 (steps to 0.9: the snippet at the end
# of GRIDWORLD.md).
python -m experiments.train --config=experiments/configs/ppo_doorkey.py \
    --workdir=runs/gridworld/ppo_doorkey --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/option_critic_doorkey.py \
    --workdir=runs/gridworld/option_critic_doorkey --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/option_critic_doorkey.py \
    --workdir=runs/gridworld/option_critic_doorkey_1option --config.seeds=0,1,2 \
    --config.num_options=1
python -m experiments.plot runs/gridworld/ppo_doorkey runs/gridworld/option_critic_doorkey \
    runs/gridworld/option_critic_doorkey_1option --statistic=iqm \
    --out=runs/gridworld/doorkey_5x5.png
for w in 90000:100000 450000:500000 950000:1000000; do
  python -m experiments.summarize runs/gridworld/ppo_doorkey runs/gridworld/option_critic_doorkey \
      runs/gridworld/option_critic_doorkey_1option --statistic=iqm --steps=$w
done
python -m experiments.summarize runs/gridworld/ppo_doorkey runs/gridworld/option_critic_doorkey \
    runs/gridworld/option_critic_doorkey_1option --statistic=iqm --last=0.1 \
    --eval=eval_return,eval_length
python -m experiments.summarize runs/gridworld/option_critic_doorkey --statistic=iqm \
    --metric=option_termination_rate --last=0.1 --eval=eval_option_duration

# PPO throughput against PureJaxRL, same config, interleaved in one process
# (experiments/benchmarks/README.md).
python -m experiments.benchmarks.throughput --config=experiments/configs/ppo_cartpole.py \
    --reference=purejaxrl --reference_path="$PUREJAXRL"  # a local purejaxrl checkout

# 2 local processes vs 1 (experiments/benchmarks/SCALING.md).
python -m experiments.benchmarks.scaling

# ---- latent skills (agent `latent_skills`, losses `hrljax.losses.latent_skills`) --------------

# PULSE-style distillation from a PPO expert on four rooms, seeds 0-2 (experiments/results/
# SKILLS.md): greedy success 1.0 and 13.34 / 14.31 / 13.19 steps to the goal, the expert's on
# every seed; then the goal moved to (11, 8): environment steps to a greedy evaluation of at most
# 25 steps, latent high level 163,840 / 153,600 / 143,360 vs PPO from scratch 92,160 on every seed
# (a_hi's starting std e^0.5: 163,840 / 174,080 / 163,840; e^-1: 235,520 / 215,040 / 215,040;
# e^-2: never in 300k steps); option-critic from scratch 133,120 / 153,600 / 143,360.
python -m experiments.train --config=experiments/configs/ppo_fourrooms.py \
    --workdir=runs/skills/expert --config.seeds=0 --config.total_timesteps=600000
python -m experiments.train --config=experiments/configs/latent_skills_distill_fourrooms.py \
    --workdir=runs/skills/distill --config.seeds=0,1,2
python -m experiments.summarize runs/skills/distill --metric=episode_length --last=0.1
python -m experiments.train --config=experiments/configs/latent_skills_fourrooms.py \
    --workdir=runs/skills/high_level --config.seeds=0,1,2
python -m experiments.train --config=experiments/configs/ppo_fourrooms_moved.py \
    --workdir=runs/skills/ppo_moved --config.seeds=0,1,2
for v in 0.5 -1 -2; do
  python -m experiments.train --config=experiments/configs/latent_skills_fourrooms.py \
      --workdir=runs/skills/high_level_logstd$v --config.seeds=0,1,2 --config.a_hi_log_std_init=$v
done
python -m experiments.train --config=experiments/configs/latent_skills_distill_fourrooms.py \
    --workdir=runs/skills/distill_1update --config.seeds=0 --config.total_timesteps=512 \
    --config.log_every=1 --config.eval_every=0 --config.checkpoint_every=1
python -m experiments.train --config=experiments/configs/latent_skills_fourrooms.py \
    --workdir=runs/skills/high_level_untrained --config.seeds=0,1,2 \
    --config.skill_run=runs/skills/distill_1update
python -m experiments.train --config=experiments/configs/option_critic_fourrooms.py \
    --workdir=runs/skills/option_critic_moved --config.seeds=0,1,2 --config.total_timesteps=300000 \
    --config.env_kwargs.goal="(11, 8)" --config.eval_every=80 --config.log_every=80 \
    --config.checkpoint_every=800
python -m experiments.steps_to_threshold runs/skills/ppo_moved runs/skills/high_level \
    runs/skills/high_level_logstd0.5 runs/skills/high_level_logstd-1 runs/skills/high_level_logstd-2 \
    runs/skills/high_level_untrained runs/skills/option_critic_moved --metric=eval_length \
    --at_most=25 --statistic=iqm
# The skills' picture (SKILLS.md): 30 of 32 prior-sampled episodes reach the east doorway.
python -m experiments.plot_skills runs/skills/distill --out=skills.png

# ---- group-relative (agent `group_relative`, losses `hrljax.losses.group_relative`) ----------

# GiGPO vs GRPO, four rooms with a random start and goal per task, same budget (2.1M env steps),
# seeds 0-2 (README "GiGPO vs GRPO" row; experiments/results/GROUP_RELATIVE.md): mean success over
# the last 10% of updates, GiGPO 0.867 +- 0.020 vs GRPO 0.676 +- 0.025.
python -m experiments.train --config=experiments/configs/gigpo_fourrooms.py \
    --workdir=runs/gigpo_fourrooms --config.seeds=0,1,2 --config.log_every=1
python -m experiments.train --config=experiments/configs/grpo_fourrooms.py \
    --workdir=runs/grpo_fourrooms --config.seeds=0,1,2 --config.log_every=1
python -m experiments.summarize runs/gigpo_fourrooms runs/grpo_fourrooms --metric=success_rate \
    --last=0.1

# The same runs at half the budget (GROUP_RELATIVE.md): success over updates 113-128, i.e. env
# steps (917504, 1048576], GiGPO 0.607 / 0.533 / 0.608, GRPO 0.580 / 0.449 / 0.530.
python -m experiments.summarize runs/gigpo_fourrooms runs/grpo_fourrooms --metric=success_rate \
    --steps=917504:1048576

# GiGPO advantages on device vs a dictionary-based NumPy implementation (README "GiGPO
# advantages" row, experiments/benchmarks/README.md): speed-ups and the largest difference.
python -m experiments.benchmarks.advantages

# Hi-Agent's two-level agent (agent `hi_agent`) vs GiGPO and GRPO on the same task and budget
# (2.1M env steps, every branch counted), seeds 0-2, evaluation every 32 updates with 256
# episodes (experiments/results/HI_AGENT.md): final evaluation success IQM 0.488 (Hi-Agent) vs
# 0.884 (GiGPO) and 0.738 (GRPO); ablation `subgoal_reached` 0.099; variant K=2, D=16 0.449.
for preset in hi_agent gigpo grpo; do
  python -m experiments.train --config=experiments/configs/${preset}_fourrooms.py \
      --workdir=runs/hi_agent/${preset} --config.seeds=0,1,2 --config.log_every=1 \
      --config.eval_every=32 --config.eval_episodes=256
done
python -m experiments.train --config=experiments/configs/hi_agent_fourrooms.py \
    --workdir=runs/hi_agent/hi_agent_subgoal_reached --config.execution_success=subgoal_reached \
    --config.seeds=0,1,2 --config.log_every=1 --config.eval_every=32 --config.eval_episodes=256
python -m experiments.train --config=experiments/configs/hi_agent_fourrooms.py \
    --workdir=runs/hi_agent/hi_agent_k2_d16 --config.num_segments=2 --config.num_decisions=16 \
    --config.seeds=0,1,2 --config.log_every=1 --config.eval_every=32 --config.eval_episodes=256
python -m experiments.summarize runs/hi_agent/gigpo runs/hi_agent/grpo runs/hi_agent/hi_agent \
    runs/hi_agent/hi_agent_subgoal_reached runs/hi_agent/hi_agent_k2_d16 \
    --metric=episode_length --last=0.1 --eval=eval_return,eval_length --statistic=iqm
python -m experiments.steps_to_threshold runs/hi_agent/gigpo runs/hi_agent/grpo \
    runs/hi_agent/hi_agent runs/hi_agent/hi_agent_k2_d16 --metric=eval_return --at_least=0.5 \
    --statistic=iqm
# The subgoals of one greedy episode (HI_AGENT.md): the goal reached at step 61 of 64.
python -m experiments.plot_hi_agent runs/hi_agent/hi_agent --episode_seed=2 --out=subgoals.png

# ---------------------------------------------------------------------------------------------
# Offline goal-conditioned agents on OGBench's point mazes (experiments/results/OGBENCH.md,
# README "Measured results": medium at 5,000 updates, giant OTA vs HIQL). Every run:
# `python -m experiments.train` (seeds side by side in one program; OGBench's five-task
# evaluation on the host every `eval_every` updates and at the end, `periodic_eval_episodes` /
# `eval_episodes` per task); tables and curves: `python -m experiments.ogbench_curves RUN_DIR...`
# (reads metrics.jsonl). The budget of every table: batch 256, 256x2 networks, gamma 0.995 on giant.
# ---------------------------------------------------------------------------------------------
B="--config.batch_size=256 --config.value_hidden_sizes=(256,256) --config.actor_hidden_sizes=(256,256)"

# The datasets (OGBENCH.md "Setup": OGBench's navigate protocol regenerated locally, seed 0)
for m in medium large giant; do
  python -m experiments.make_dataset --env=pointmaze-$m-navigate-v0 \
      --out=data/pointmaze-$m-navigate-v0.npz --seed=0
done

# Medium, 2,000 updates, seeds 0-2, 20 episodes per task (OGBENCH.md "Medium maze", 2,000 rows)
for a in gcivl hiql ota; do
  python -m experiments.train --config=experiments/configs/${a}_pointmaze.py \
      --workdir=runs/ogbench/medium_${a}_2k $B --config.seeds=0,1,2 --config.num_updates=2000 \
      --config.log_every=250 --config.checkpoint_every=1000 --config.eval_episodes=20
done
python -m experiments.ogbench_curves runs/ogbench/medium_*_2k --table --out=runs/ogbench/medium_2k.png

# Medium, 5,000 updates, seeds 0-2, periodic evaluation at 2,500 (5 episodes per task), final 20
# (OGBENCH.md "Medium maze" 2,500 and 5,000 rows; README: OTA 60 %, HIQL 7 %, GCIVL 4 %)
for a in gcivl hiql ota; do
  python -m experiments.train --config=experiments/configs/${a}_pointmaze.py \
      --workdir=runs/ogbench/medium_${a}_5k $B --config.seeds=0,1,2 --config.num_updates=5000 \
      --config.log_every=250 --config.checkpoint_every=2500 --config.eval_every=2500 \
      --config.periodic_eval_episodes=5 --config.eval_episodes=20
done
python -m experiments.ogbench_curves runs/ogbench/medium_*_5k --table --out=runs/ogbench/medium_5k.png
# the path_values diagnostics of OGBENCH.md Appendix B: --y=task<k>_v_start, task<k>_vh_start,
# task<k>_action_cos on the same run directories
python -m experiments.ogbench_curves runs/ogbench/medium_*_5k --table --y=task1_action_cos \
    --out=runs/ogbench/medium_5k_cos.png

# Large and giant, 2,000 updates, seed 0, 20 episodes per task (OGBENCH.md "Large and giant")
for m in large giant; do
  G=""; [ $m = giant ] && G="--config.gamma=0.995"
  for a in gcivl hiql ota; do
    python -m experiments.train --config=experiments/configs/${a}_pointmaze.py \
        --workdir=runs/ogbench/${m}_${a}_2k $B $G --config.env_name=pointmaze-$m-navigate-v0 \
        --config.dataset_path=data/pointmaze-$m-navigate-v0.npz --config.seeds=0 \
        --config.num_updates=2000 --config.log_every=250 --config.checkpoint_every=1000 \
        --config.eval_episodes=20
  done
done
python -m experiments.ogbench_curves runs/ogbench/large_*_2k runs/ogbench/giant_*_2k --table \
    --out=runs/ogbench/large_giant_2k.png

# Giant, 3,000 updates, seed 0, 10 episodes per task (OGBENCH.md "Large and giant", 3,000 rows)
for a in hiql ota; do
  python -m experiments.train --config=experiments/configs/${a}_pointmaze.py \
      --workdir=runs/ogbench/giant_${a}_3k $B --config.gamma=0.995 \
      --config.env_name=pointmaze-giant-navigate-v0 \
      --config.dataset_path=data/pointmaze-giant-navigate-v0.npz --config.seeds=0 \
      --config.num_updates=3000 --config.log_every=250 --config.checkpoint_every=1000 \
      --config.eval_episodes=10
done

# Giant OTA vs HIQL, seed 0, long runs: periodic evaluations every 5,000 updates (8 episodes per
# task), final 20; OTA to 73,500, HIQL to 60,500 updates (OGBENCH.md "OTA vs HIQL on the giant
# maze"; README: OTA 64 % at 73,500, HIQL 0 % through 60,500). Several hours each; a stopped run
# resumes from its latest checkpoint with the same command.
for a in ota:73500 hiql:60500; do
  python -m experiments.train --config=experiments/configs/${a%:*}_pointmaze.py \
      --workdir=runs/ogbench/giant_${a%:*}_long $B --config.gamma=0.995 \
      --config.env_name=pointmaze-giant-navigate-v0 \
      --config.dataset_path=data/pointmaze-giant-navigate-v0.npz --config.seeds=0 \
      --config.num_updates=${a#*:} --config.log_every=500 --config.checkpoint_every=2000 \
      --config.eval_every=5000 --config.periodic_eval_episodes=8 --config.eval_episodes=20
done
python -m experiments.ogbench_curves runs/ogbench/giant_ota_long runs/ogbench/giant_hiql_long \
    --table --out=runs/ogbench/giant_long.png
python -m experiments.ogbench_curves runs/ogbench/giant_ota_long --table --y=task2_vh_start \
    --out=runs/ogbench/giant_vh.png

# HIQL update throughput vs OGBench's own JAX HIQL, batch 1024, OGBench sizes (benchmarks/HIQL.md;
# README: 1.00x updates per CPU second). Needs OGBench's impls/ folder outside this repository.
python -m experiments.benchmarks.hiql_throughput --reference_path="$OGBENCH/impls"  # a local ogbench checkout --rounds=5 --updates=5

# Point-maze dataset generation speed, generate vs the plain protocol loop (OGBENCH.md Appendix D)
python -m experiments.benchmarks.pointmaze_generation --env=pointmaze-medium-navigate-v0 \
    --episodes=1 --steps=1001 --reps=3

# Snapshot resets for PPO on four rooms (GROUP_RELATIVE.md): environment steps to a greedy
# evaluation of at most 25 steps, IQM over seeds 0-2: 81,920 without resets, 81,920 at p0 = 0.5,
# 71,680 at p0 = 1.0 (the teacher: runs/skills/expert of the latent-skills block).
python -m experiments.snapshot_states --run=runs/skills/expert --out=runs/snapshot/teacher.npz \
    --num_envs=16 --num_steps=256
SNAPSHOT_RUN="--config.seeds=0,1,2 --config.total_timesteps=300000 --config.log_every=5 \
    --config.eval_every=5 --config.checkpoint_every=50"
python -m experiments.train --config=experiments/configs/ppo_fourrooms.py \
    --workdir=runs/snapshot/ppo $SNAPSHOT_RUN
python -m experiments.train --config=experiments/configs/ppo_fourrooms.py:runs/snapshot/teacher.npz \
    --workdir=runs/snapshot/ppo_snapshot_p05 $SNAPSHOT_RUN
python -m experiments.train --config=experiments/configs/ppo_fourrooms.py:runs/snapshot/teacher.npz \
    --workdir=runs/snapshot/ppo_snapshot_p1 $SNAPSHOT_RUN \
    --config.env_kwargs.snapshot_reset.start_probability=1.0
for t in 100 50 25; do
  python -m experiments.steps_to_threshold runs/snapshot/ppo runs/snapshot/ppo_snapshot_p05 \
      runs/snapshot/ppo_snapshot_p1 --metric=eval_length --at_most=$t --statistic=iqm
done
python -m experiments.steps_to_threshold runs/snapshot/ppo runs/snapshot/ppo_snapshot_p05 \
    runs/snapshot/ppo_snapshot_p1 --metric=eval_return --at_least=0.9 --statistic=iqm

# Snapshot resets for SAC on Pendulum (GROUP_RELATIVE.md): steps to a greedy return of -400,
# IQM over seeds 0-2: 4,333 without resets, 4,000 at p0 = 0.5; final returns equal.
python -m experiments.train --config=experiments/configs/sac_pendulum.py \
    --workdir=runs/snapshot/sac_teacher --config.seeds=0
python -m experiments.snapshot_states --run=runs/snapshot/sac_teacher \
    --out=runs/snapshot/sac_teacher.npz --num_envs=16 --num_steps=200
SAC_RUN="--config.seeds=0,1,2 --config.eval_every=1000 --config.eval_episodes=8"
python -m experiments.train --config=experiments/configs/sac_pendulum.py:runs/snapshot/sac_teacher.npz \
    --workdir=runs/snapshot/sac_snapshot_p05 $SAC_RUN
python -m experiments.train --config=experiments/configs/sac_pendulum.py \
    --workdir=runs/snapshot/sac $SAC_RUN
for t in -1000 -400 -200; do
  python -m experiments.steps_to_threshold runs/snapshot/sac runs/snapshot/sac_snapshot_p05 \
      --metric=eval_return --at_least=$t --statistic=iqm
done

# GRPO-family estimators on the token game from a weak start (GROUP_RELATIVE.md): final greedy
# success, IQM over seeds 0-2: GRPO 0.600, Dr. GRPO 0.714, RLOO 0.706, unlikeliness 0.690.
for e in grpo dr_grpo rloo unlikeliness; do
  python -m experiments.train --config=experiments/configs/token_grpo_token_game.py \
      --workdir=runs/tg_est/$e --config.seeds=0,1,2 --config.estimator=$e \
      --config.bc_random_question_prob=1.0 --config.log_every=10 --config.eval_every=20
done
python -m experiments.summarize runs/tg_est/grpo runs/tg_est/dr_grpo runs/tg_est/rloo \
    runs/tg_est/unlikeliness --metric=episode_return --eval=eval_return --statistic=iqm

# GRPO and nine variants on SmolLM2-135M arithmetic (GROUP_RELATIVE.md): greedy accuracy on
# 128 held-out problems after 20 updates, mean over seeds 0-2: GRPO 0.849, Dr. GRPO 0.901, DAPO
# 0.862, ROVER 0.893, PACS 0.906, unlikeliness 0.883, Scaf-GRPO 0.904, GTPO 0.880, CGPO 0.656;
# at two epochs GRPO 0.924 and LLDS 0.872; the model before training 0.633.
run() {  # arm, seed, the arm's overrides
  arm=$1 seed=$2; shift 2
  python -m experiments.train --config=experiments/configs/grpo_smollm2_arithmetic.py \
      --workdir=runs/smollm2_cmp/${arm}_s$seed --config.seeds=$seed --config.num_updates=20 \
      --config.eval_problems=0 "$@"
}
for s in 0 1 2; do
  run grpo $s --config.shared_prefix=True
  run dr_grpo $s --config.shared_prefix=True --config.estimator=dr_grpo \
      --config.loss_aggregation=seq_mean_constant_norm
  run dapo $s --config.shared_prefix=True --config.clip_epsilon_high=0.28 \
      --config.loss_aggregation=token_mean --config.dynamic_sampling=True
  run rover $s --config.shared_prefix=True --config.objective=rover
  run pacs $s --config.shared_prefix=True --config.objective=pacs --config.task.format_weight=0.0
  run unlikeliness $s --config.shared_prefix=True --config.estimator=unlikeliness
  run gtpo $s --config.shared_prefix=True --config.objective=gtpo
  run cgpo $s --config.shared_prefix=True --config.objective=cgpo --config.task.format_weight=0.0
  run scaf_grpo $s --config.hints=scaffold
  run grpo_2epochs $s --config.shared_prefix=True --config.update_epochs=2
  run llds $s --config.shared_prefix=True --config.llds_coef=0.2 --config.update_epochs=2
done
# greedy accuracy on 128 held-out problems after the last update, and of the model before training
python -m experiments.evaluate runs/smollm2_cmp/*_s? --step=20 --set=eval_problems=128 \
    --set=eval_samples=0 --out=runs/smollm2_cmp/eval128.jsonl
python -m experiments.evaluate runs/smollm2_cmp/grpo_s0 --step=0 --set=eval_problems=128 \
    --set=eval_samples=0
# per arm: the training stream over updates 16-20 with the held-out evaluation, then all updates
for a in grpo dr_grpo dapo rover pacs unlikeliness gtpo cgpo scaf_grpo grpo_2epochs llds; do
  python -m experiments.summarize runs/smollm2_cmp/${a}_s0 runs/smollm2_cmp/${a}_s1 \
      runs/smollm2_cmp/${a}_s2 --metric=correct,all_fail_fraction,formatted,logp --last=0.25 \
      --evaluations=runs/smollm2_cmp/eval128.jsonl --eval=eval_correct,eval_formatted \
      --statistic=iqm
  python -m experiments.summarize runs/smollm2_cmp/${a}_s0 runs/smollm2_cmp/${a}_s1 \
      runs/smollm2_cmp/${a}_s2 --metric=all_fail_fraction --last=1 --statistic=iqm
done

# Offline BC, filtered BC, A-LoL and offline ArCHer on logged token-game dialogues
# (GROUP_RELATIVE.md): final greedy success, IQM over seeds 0-2: BC 0.395, filtered BC 0.682,
# A-LoL 0.279 (uniform rows 0.345, KL variant 0.375), offline ArCHer 0.523 (β = 10: 0.693)
for o in bc filtered_bc alol archer; do
  python -m experiments.train --config=experiments/configs/token_offline_token_game.py \
      --workdir=runs/offline_tg/$o --config.seeds=0,1,2 --config.objective=$o
done
python -m experiments.train --config=experiments/configs/token_offline_token_game.py \
    --workdir=runs/offline_tg/alol_uniform --config.seeds=0,1,2 --config.objective=alol \
    --config.priority_sampling=False
python -m experiments.train --config=experiments/configs/token_offline_token_game.py \
    --workdir=runs/offline_tg/alol_kl --config.seeds=0,1,2 --config.objective=alol \
    --config.alol_variant=kl
python -m experiments.train --config=experiments/configs/token_offline_token_game.py \
    --workdir=runs/offline_tg/archer_beta10 --config.seeds=0,1,2 --config.objective=archer \
    --config.awr_inv_temp=10.0 --config.awr_max_weight=100.0

# f-DVL vs GCIVL vs HIQL vs SMORe on the medium point maze, 5,000 updates, seeds 0-2
# (GROUP_RELATIVE.md): success 0.133 / 0.093 / 0.183 / 0.067 (needs
# data/pointmaze-medium-navigate-v0.npz, above)
DUAL_RUN="--config.seeds=0,1,2 --config.num_updates=5000 --config.log_every=250 \
    --config.checkpoint_every=2500 --config.eval_every=2500 --config.periodic_eval_episodes=5 \
    --config.eval_episodes=20"
python -m experiments.train --config=experiments/configs/gcivl_pointmaze.py \
    --workdir=runs/dualrl/medium_fdvl_tv_5k $B $DUAL_RUN --config.value_loss=fdvl
python -m experiments.train --config=experiments/configs/gcivl_pointmaze.py \
    --workdir=runs/dualrl/medium_ivl_5k $B $DUAL_RUN
python -m experiments.train --config=experiments/configs/hiql_pointmaze.py \
    --workdir=runs/dualrl/medium_hiql_5k $B $DUAL_RUN
python -m experiments.train --config=experiments/configs/smore_pointmaze.py \
    --workdir=runs/dualrl/medium_smore_5k $B $DUAL_RUN --config.score_hidden_sizes="(256,256)"
python -m experiments.summarize runs/dualrl/medium_fdvl_tv_5k runs/dualrl/medium_ivl_5k \
    runs/dualrl/medium_hiql_5k runs/dualrl/medium_smore_5k --metric=value_loss --eval=success

# ---- safety: PointHazard-v0 (experiments/results/SAFETY.md; README's PointHazard rows) ----
# Every run trains its seeds side by side in one program; `experiments.safety_table <dirs>` prints
# the table's numbers (violating steps in training, last-10% training return/cost, evaluation).

# Off-policy table, seeds 0-2, 30k control steps (README "PointHazard, off-policy"): SAC,
# two-rate SAC (Bresa with the reflex off), Recovery RL, Bresa.
python -m experiments.train --config=experiments/configs/sac_pointhazard.py --config.seeds=0,1,2 --workdir=runs/safety/sac
python -m experiments.train --config=experiments/configs/bresa_pointhazard.py --config.seeds=0,1,2 --config.reflex=False --config.risk_updates_per_step=0 --config.risk_pretrain_updates=0 --workdir=runs/safety/two_rate_sac
python -m experiments.train --config=experiments/configs/recovery_rl_pointhazard.py --config.seeds=0,1,2 --workdir=runs/safety/recovery_rl
python -m experiments.train --config=experiments/configs/bresa_pointhazard.py --config.seeds=0,1,2 --workdir=runs/safety/bresa
for run in sac two_rate_sac recovery_rl bresa; do python -m experiments.safety_table runs/safety/$run; done

# The safe off-policy variants that meet the thresholds, seeds 0-17 (0-2 and 0-8 are subsets):
# Recovery RL with the switch at 0.9 and a hinge penalty; Bresa with the reflex at 0.9 and ν = 5.
python -m experiments.train --config=experiments/configs/recovery_rl_lagrangian_pointhazard.py --config.seeds=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 --workdir=runs/safety/recovery_rl_lagrangian
python -m experiments.train --config=experiments/configs/bresa_lagrangian_pointhazard.py --config.seeds=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17 --workdir=runs/safety/bresa_lagrangian
python -m experiments.safety_table runs/safety/recovery_rl_lagrangian
python -m experiments.safety_table runs/safety/bresa_lagrangian

# On-policy table, seeds 0-2, 240k control steps, cost limit 1 (README "PointHazard, on-policy"):
# PPO, PPO-Lagrangian, PID-Lagrangian, shielded PPO.
for config in ppo_pointhazard ppo_lagrangian_pointhazard ppo_pid_lagrangian_pointhazard shielded_ppo_pointhazard; do
  python -m experiments.train --config=experiments/configs/$config.py --config.seeds=0,1,2 --workdir=runs/safety/$config
  python -m experiments.safety_table runs/safety/$config
done

# Return against cost, one point per seed (the SAFETY.md pictures).
python -m experiments.plot_safety --runs=runs/safety/sac,runs/safety/two_rate_sac,runs/safety/recovery_rl,runs/safety/bresa --out=offpolicy_return_vs_cost.png
python -m experiments.plot_safety --runs=runs/safety/ppo_pointhazard,runs/safety/ppo_lagrangian_pointhazard,runs/safety/ppo_pid_lagrangian_pointhazard,runs/safety/shielded_ppo_pointhazard --cost_limit=1 --out=onpolicy_return_vs_cost.png

# Reflex speed of the two-rate rollout (README "Bresa reflex on vs off").
python -m experiments.benchmarks.two_rate

# ---------------------------------------------------------------------------------------------
# Token game and language-model agents (experiments/results/ARCHER.md, experiments/benchmarks/LLM.md,
# README "Measured results"). Every run: `python -m experiments.train` (seeds vmapped in one
# program, greedy evaluation on the learner's fixed evaluation games every `eval_every` updates);
# tables and curves: `python -m experiments.token_game_curves RUN_DIR...` (reads metrics.jsonl).
# ---------------------------------------------------------------------------------------------

# ArCHer vs token PPO on the token game, seeds 0-2, same BC start per seed
# (ARCHER.md "Result: token PPO reaches every bar first"; README token-game paragraph: bars 0.80 / 0.85 / 0.90)
python -m experiments.train --config=experiments/configs/token_ppo_token_game.py \
    --workdir=runs/token_game/ppo --config.seeds=0,1,2 --config.log_every=5 --config.eval_every=5 \
    --config.total_timesteps=12800
python -m experiments.train --config=experiments/configs/archer_token_game.py \
    --workdir=runs/token_game/archer --config.seeds=0,1,2 --config.log_every=2 \
    --config.eval_every=2 \
    --config.actor_learning_rate=1e-4 --config.actor_updates=16 \
    --config.actor_baseline_samples=4 --config.critic_updates=100 --config.total_timesteps=10240
python -m experiments.token_game_curves runs/token_game/ppo runs/token_game/archer \
    --labels=PPO,ArCHer --bars=0.8,0.85,0.9 --png=runs/token_game/archer_vs_ppo.png

# The same on a second seed set (ARCHER.md, seed set B: bars 0.90 / 0.95 / 1.00)
python -m experiments.train --config=experiments/configs/token_ppo_token_game.py \
    --workdir=runs/token_game_b/ppo --config.seeds=3,4,5 --config.log_every=5 \
    --config.eval_every=5 \
    --config.total_timesteps=6400
python -m experiments.train --config=experiments/configs/archer_token_game.py \
    --workdir=runs/token_game_b/archer --config.seeds=3,4,5 --config.log_every=2 \
    --config.eval_every=2 \
    --config.actor_learning_rate=1e-4 --config.actor_updates=16 \
    --config.actor_baseline_samples=4 --config.critic_updates=100 --config.total_timesteps=6144
python -m experiments.token_game_curves runs/token_game_b/ppo runs/token_game_b/archer \
    --labels=PPO,ArCHer --bars=0.9,0.95,1.0

# The same at horizon 10 under the Twenty Questions rules (ARCHER.md "Result at horizon 10":
# bars 0.7 / 0.8 / 0.9, PPO 640 / 1,920 / 9,600 utterances, ArCHer 2,048 / - / - in 9,216;
# ArCHer was stopped after 36 of its 40 iterations). The BC start is computed by the first run
# and read from the cache by the second.
# Horizon 20 the same way (H=20; ARCHER.md "Result at horizon 20"). The runs checkpoint often,
# so that a stopped run resumes with the same command.
for H in 10 20; do
  RULES="--config.env_kwargs.max_turns=$H --config.env_kwargs.correct_reward=0.0 \
      --config.env_kwargs.turn_reward=-1.0 --config.env_kwargs.end_on_wrong_guess=False"
  python -m experiments.train --config=experiments/configs/token_ppo_token_game.py \
      --workdir=runs/horizon/ppo_h$H --config.seeds=0,1,2 --config.log_every=5 \
      --config.eval_every=5 --config.total_timesteps=12800 --config.checkpoint_every=5 \
      --warm_start_cache=runs/warm_starts $RULES
  python -m experiments.train --config=experiments/configs/archer_token_game.py \
      --workdir=runs/horizon/archer_h$H --config.seeds=0,1,2 --config.log_every=2 \
      --config.eval_every=2 --config.actor_learning_rate=1e-4 --config.actor_updates=16 \
      --config.actor_baseline_samples=4 --config.critic_updates=100 \
      --config.total_timesteps=10240 --config.checkpoint_every=2 \
      --warm_start_cache=runs/warm_starts $RULES
  python -m experiments.token_game_curves runs/horizon/ppo_h$H runs/horizon/archer_h$H \
      --labels=PPO,ArCHer --y=eval_success --bars=0.7,0.8,0.9 --png=runs/horizon/h$H.png
done

# Token PPO, filtered BC and GRPO to 25,600 utterances per seed (ARCHER.md "Baselines";
# README: filtered BC 0.92 at 14,080, GRPO at most 0.86 within 25,600)
python -m experiments.train --config=experiments/configs/token_ppo_token_game.py \
    --workdir=runs/token_game/ppo_25600 --config.seeds=0,1,2 --config.log_every=10 \
    --config.eval_every=10
python -m experiments.train --config=experiments/configs/token_filtered_bc_token_game.py \
    --workdir=runs/token_game/fbc --config.seeds=0,1,2 --config.log_every=10 --config.eval_every=10
python -m experiments.train --config=experiments/configs/token_grpo_token_game.py \
    --workdir=runs/token_game/grpo --config.seeds=0,1,2 --config.log_every=10 --config.eval_every=10
python -m experiments.token_game_curves runs/token_game/ppo_25600 runs/token_game/fbc \
    runs/token_game/grpo --labels=PPO,FilteredBC,GRPO --bars=0.9

# ArCHer with actor settings that learn, and the fresh-games gate (ARCHER.md "ArCHer with actor
# settings that learn": 0.849 at 10,240; 0.816 at 6,144; 0.878 from 5,120; 0.738 at 5,120)
python -m experiments.train --config=experiments/configs/archer_token_game.py \
    --workdir=runs/token_game/archer_a16 --config.seeds=0,1,2 --config.log_every=4 \
    --config.eval_every=4 --config.checkpoint_every=40 \
    --config.actor_learning_rate=1e-4 --config.actor_updates=16 --config.total_timesteps=10240
python -m experiments.train --config=experiments/configs/archer_token_game.py \
    --workdir=runs/token_game/archer_a16_k4 --config.seeds=0,1,2 --config.log_every=4 \
    --config.eval_every=4 --config.checkpoint_every=40 \
    --config.actor_learning_rate=1e-4 --config.actor_updates=16 \
    --config.actor_baseline_samples=4 --config.total_timesteps=6144
python -m experiments.train --config=experiments/configs/archer_token_game.py \
    --workdir=runs/token_game/archer_best --config.seeds=0,1,2 --config.log_every=4 \
    --config.eval_every=4 --config.checkpoint_every=40 \
    --config.actor_learning_rate=1e-4 --config.actor_updates=16 \
    --config.actor_baseline_samples=4 --config.critic_updates=100 --config.total_timesteps=7680
python -m experiments.train --config=experiments/configs/archer_token_game.py \
    --workdir=runs/token_game/archer_best_gate --config.seeds=0,1,2 --config.log_every=4 \
    --config.eval_every=4 --config.checkpoint_every=40 \
    --config.actor_learning_rate=1e-4 --config.actor_updates=16 \
    --config.actor_baseline_samples=4 --config.critic_updates=100 \
    --config.warmup_fresh_q_gap=0.3 --config.total_timesteps=5120
python -m experiments.token_game_curves runs/token_game/archer_a16 runs/token_game/archer_a16_k4 \
    runs/token_game/archer_best runs/token_game/archer_best_gate \
    --labels=A16,A16_K4,Best,BestGate --bars=0.9

# The config's own ArCHer settings (ARCHER.md appendix: no gain over the BC start)
python -m experiments.train --config=experiments/configs/archer_token_game.py \
    --workdir=runs/token_game/archer_config --config.seeds=0,1,2 --config.log_every=4 \
    --config.eval_every=4 --config.checkpoint_every=40 \
    --config.total_timesteps=4608

# ArCHer's actor loss against the exact advantage (ARCHER.md "The actor loss against an exact
# advantage"; README: the actor loss learns at PPO's rate)
for args in "--optimizer=adam --learning_rate=1e-4" "--optimizer=sgd --learning_rate=0.01" \
    "--advantage=monte_carlo" "--epochs=1 --minibatches=1" \
    "--epochs=1 --minibatches=1 --optimizer=sgd --learning_rate=0.01" \
    "--advantage_noise=2" "--advantage_noise=5" "--advantage_noise=2 --optimizer=sgd \
    --learning_rate=0.01"; do
  name=$(echo "$args" | tr -d ' -' | tr '=' '_')
  python -m experiments.diagnostics.archer_actor --config=archer_token_game --seeds=0,1,2 \
      --iterations=100 --eval_every=10 $args --out=runs/diagnostics/actor_$name.jsonl
done

# The learned critic against the exact values (ARCHER.md "How good is the learned critic's
# advantage?"; README: advantage correlation 0.05-0.20)
python -m experiments.diagnostics.archer_critic --config=archer_token_game --seed=0 --steps=400 \
    --eval_every=100 --out=runs/diagnostics/critic.jsonl
python -m experiments.diagnostics.archer_critic --config=archer_token_game --seed=0 \
    --buffer_iterations=32 --steps=800 --eval_every=400 --out=runs/diagnostics/critic_8192.jsonl
python -m experiments.diagnostics.archer_critic --config=archer_token_game --seed=0 --steps=1600 \
    --eval_every=200 --out=runs/diagnostics/critic_long.jsonl
python -m experiments.diagnostics.archer_critic --config=archer_token_game --seed=0 --steps=400 \
    --eval_every=50 --config.critic_init=random --config.critic_causal=False \
    --config.critic_readout=mean --out=runs/diagnostics/critic_scratch.jsonl
# The same critic at horizon 20 under the Twenty Questions rules, from the BC start the horizon-20
# runs cached (ARCHER.md "The critic at horizon 20")
python -m experiments.diagnostics.archer_critic --config=archer_token_game \
    --config.env_kwargs.max_turns=20 --config.env_kwargs.correct_reward=0.0 \
    --config.env_kwargs.turn_reward=-1.0 --config.env_kwargs.end_on_wrong_guess=False \
    --warm_start_cache=runs/warm_starts --seed=0 --steps=800 --eval_every=200 \
    --out=runs/diagnostics/critic_h20_s0.jsonl

# ArCHer update vs token PPO's gradient step (README; ARCHER.md "Throughput": 1.42 s vs 0.48 s)
python -m experiments.benchmarks.archer_throughput \
    --config=experiments/configs/archer_token_game.py --batch=1024 --reps=7

# GRPO + LoRA on SmolLM2-135M, arithmetic, seed 0, 30 updates (README: greedy reward 0.375 -> 1.44)
python -m experiments.train --config=experiments/configs/grpo_smollm2_arithmetic.py \
    --workdir=runs/grpo_smollm2 --config.seeds=0
# ArCHer + LoRA on SmolLM2-135M, text guessing game, seed 0, 40 iterations (README)
python -m experiments.train --config=experiments/configs/archer_smollm2_game.py \
    --workdir=runs/archer_smollm2 --config.seeds=0

# The text game with SmolLM2-135M at equal lines (336 per seed), seeds 0-2, one run per seed
# (ARCHER.md "Result on the text game"): ArCHer with the pretrained critic, ArCHer with the
# critic from scratch, token PPO, GRPO at two schedules (a GRPO run peaks at 11.7 GB: at most
# two side by side in 24 GB; `--config.micro_batches=4` computes the same update at 5.1 GB)
for seed in 0 1 2; do
  python -m experiments.train --config=experiments/configs/archer_smollm2_game.py \
      --workdir=runs/llm_study/archer_llm/s$seed --config.seeds=$seed --config.critic_trunk=llm \
      --config.critic_llm_layers=4 --config.num_updates=42 --config.eval_every=12 \
      --config.eval_episodes=32
  python -m experiments.train --config=experiments/configs/archer_smollm2_game.py \
      --workdir=runs/llm_study/archer_scratch/s$seed --config.seeds=$seed \
      --config.num_updates=42 --config.eval_every=12 --config.eval_episodes=32
  python -m experiments.train --config=experiments/configs/token_ppo_smollm2_game.py \
      --workdir=runs/llm_study/ppo/s$seed --config.seeds=$seed --config.num_updates=14 \
      --config.eval_every=4 --config.eval_episodes=32
  python -m experiments.train --config=experiments/configs/grpo_smollm2_game.py \
      --workdir=runs/llm_study/grpo/s$seed --config.seeds=$seed --config.num_updates=14 \
      --config.eval_every=4 --config.eval_episodes=32
  # GRPO at ArCHer's schedule, one optimizer step per 8 lines
  python -m experiments.train --config=experiments/configs/grpo_smollm2_game.py \
      --workdir=runs/llm_study/grpo_8lines/s$seed --config.seeds=$seed --config.num_updates=14 \
      --config.eval_every=4 --config.eval_episodes=32 --config.num_minibatches=3
done
runs() { echo runs/llm_study/$1/s0,runs/llm_study/$1/s1,runs/llm_study/$1/s2; }
for y in eval_valid_move_fraction eval_win_rate; do
  python -m experiments.token_game_curves $(runs archer_llm) $(runs archer_scratch) $(runs ppo) \
      $(runs grpo) $(runs grpo_8lines) \
      --labels=ArCHer_pretrained,ArCHer_scratch,PPO,GRPO,GRPO_8_lines_per_step --y=$y --bars=0.5,0.9
done

# SmolLM2 sampling and one GRPO step vs transformers / TRL (README; LLM.md "Result")
make bench-llm

