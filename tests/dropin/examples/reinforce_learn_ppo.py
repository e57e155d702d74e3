# Lightning's examples/pytorch/domain_templates/reinforce_learn_ppo.py (Proximal Policy Optimization), with the
# pytorch_lightning import spelling and a small CartPole-like environment written here in place of gym.
from collections.abc import Callable, Iterator

import numpy as np
import torch
from pytorch_lightning import LightningModule, Trainer, seed_everything
from torch import nn
from torch.distributions import Categorical
from torch.utils.data import DataLoader, IterableDataset


class ToyCartPole:
    """Balance a point: the state drifts, the two actions push it left or right; done when it leaves [-1, 1]."""

    class Discrete:
        n = 2

    class Box:
        shape = (4,)

    def __init__(self):
        self.observation_space = self.Box()
        self.action_space = self.Discrete()

    def reset(self):
        self.state = np.random.uniform(-0.05, 0.05, size=4).astype(np.float32)
        self.steps = 0
        return self.state

    def step(self, action):
        x, v, a, w = (float(s) for s in self.state)
        force = 0.1 if int(action) == 1 else -0.1
        v, w = v + force + 0.05 * a, w + 0.1 * x - force
        x, a = x + 0.1 * v, a + 0.1 * w
        self.state = np.array([x, v, a, w], dtype=np.float32)
        self.steps += 1
        done = abs(x) > 1.0 or abs(a) > 1.0 or self.steps >= 40
        return self.state, 1.0, done, {}


def create_mlp(input_shape: tuple[int], n_actions: int, hidden_size: int = 128):
    return nn.Sequential(
        nn.Linear(input_shape[0], hidden_size),
        nn.ReLU(),
        nn.Linear(hidden_size, hidden_size),
        nn.ReLU(),
        nn.Linear(hidden_size, n_actions),
    )


class ActorCategorical(nn.Module):
    def __init__(self, actor_net):
        super().__init__()
        self.actor_net = actor_net

    def forward(self, states):
        logits = self.actor_net(states)
        pi = Categorical(logits=logits)
        actions = pi.sample()
        return pi, actions

    def get_log_prob(self, pi: Categorical, actions: torch.Tensor):
        return pi.log_prob(actions)


class ExperienceSourceDataset(IterableDataset):
    def __init__(self, generate_batch: Callable):
        self.generate_batch = generate_batch

    def __iter__(self) -> Iterator:
        return self.generate_batch()


class PPOLightning(LightningModule):
    def __init__(
        self,
        env: str = "CartPole-v0",
        gamma: float = 0.99,
        lam: float = 0.95,
        lr_actor: float = 3e-4,
        lr_critic: float = 1e-3,
        max_episode_len: float = 200,
        batch_size: int = 512,
        steps_per_epoch: int = 2048,
        nb_optim_iters: int = 4,
        clip_ratio: float = 0.2,
        **kwargs,
    ) -> None:
        super().__init__()

        # Hyperparameters
        self.lr_actor = lr_actor
        self.lr_critic = lr_critic
        self.steps_per_epoch = steps_per_epoch
        self.nb_optim_iters = nb_optim_iters
        self.batch_size = batch_size
        self.gamma = gamma
        self.lam = lam
        self.max_episode_len = max_episode_len
        self.clip_ratio = clip_ratio
        self.save_hyperparameters()
        self.automatic_optimization = False

        self.env = ToyCartPole()
        # value network
        self.critic = create_mlp(self.env.observation_space.shape, 1)
        # policy network (agent)
        actor_mlp = create_mlp(self.env.observation_space.shape, self.env.action_space.n)
        self.actor = ActorCategorical(actor_mlp)

        self.batch_states = []
        self.batch_actions = []
        self.batch_adv = []
        self.batch_qvals = []
        self.batch_logp = []

        self.ep_rewards = []
        self.ep_values = []
        self.epoch_rewards = []

        self.episode_step = 0
        self.avg_ep_reward = 0
        self.avg_ep_len = 0
        self.avg_reward = 0

        self.state = torch.FloatTensor(self.env.reset())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pi, action = self.actor(x)
        value = self.critic(x)
        return pi, action, value

    def discount_rewards(self, rewards: list[float], discount: float) -> list[float]:
        assert isinstance(rewards[0], float)
        cumul_reward = []
        sum_r = 0.0
        for r in reversed(rewards):
            sum_r = (sum_r * discount) + r
            cumul_reward.append(sum_r)
        return list(reversed(cumul_reward))

    def calc_advantage(self, rewards: list[float], values: list[float], last_value: float) -> list[float]:
        rews = rewards + [last_value]
        vals = values + [last_value]
        # GAE
        delta = [rews[i] + self.gamma * vals[i + 1] - vals[i] for i in range(len(rews) - 1)]
        return self.discount_rewards(delta, self.gamma * self.lam)

    def generate_trajectory_samples(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        for step in range(self.steps_per_epoch):
            self.state = self.state.to(device=self.device)

            with torch.no_grad():
                pi, action, value = self(self.state)
                log_prob = self.actor.get_log_prob(pi, action)

            next_state, reward, done, _ = self.env.step(action.cpu().numpy())

            self.episode_step += 1

            self.batch_states.append(self.state)
            self.batch_actions.append(action)
            self.batch_logp.append(log_prob)

            self.ep_rewards.append(reward)
            self.ep_values.append(value.item())

            self.state = torch.FloatTensor(next_state)

            epoch_end = step == (self.steps_per_epoch - 1)
            terminal = len(self.ep_rewards) == self.max_episode_len

            if epoch_end or done or terminal:
                # if trajectory ends abtruptly, boostrap value of next state
                if (terminal or epoch_end) and not done:
                    self.state = self.state.to(device=self.device)
                    with torch.no_grad():
                        _, _, value = self(self.state)
                        last_value = value.item()
                        steps_before_cutoff = self.episode_step
                else:
                    last_value = 0
                    steps_before_cutoff = 0

                # discounted cumulative reward
                self.batch_qvals += self.discount_rewards(self.ep_rewards + [last_value], self.gamma)[:-1]
                # advantage
                self.batch_adv += self.calc_advantage(self.ep_rewards, self.ep_values, last_value)
                # logs
                self.epoch_rewards.append(sum(self.ep_rewards))
                # reset params
                self.ep_rewards = []
                self.ep_values = []
                self.episode_step = 0
                self.state = torch.FloatTensor(self.env.reset())

            if epoch_end:
                train_data = zip(
                    self.batch_states, self.batch_actions, self.batch_logp, self.batch_qvals, self.batch_adv
                )

                for state, action, logp_old, qval, adv in train_data:
                    yield state, action, logp_old, qval, adv

                self.batch_states.clear()
                self.batch_actions.clear()
                self.batch_adv.clear()
                self.batch_logp.clear()
                self.batch_qvals.clear()

                # logging
                self.avg_reward = sum(self.epoch_rewards) / self.steps_per_epoch

                # if epoch ended abruptly, exlude last cut-short episode to prevent stats skewness
                epoch_rewards = self.epoch_rewards
                if not done:
                    epoch_rewards = epoch_rewards[:-1]

                total_epoch_reward = sum(epoch_rewards)
                nb_episodes = len(epoch_rewards)

                self.avg_ep_reward = total_epoch_reward / nb_episodes
                self.avg_ep_len = (self.steps_per_epoch - steps_before_cutoff) / nb_episodes

                self.epoch_rewards.clear()

    def actor_loss(self, state, action, logp_old, adv) -> torch.Tensor:
        pi, _ = self.actor(state)
        logp = self.actor.get_log_prob(pi, action)
        ratio = torch.exp(logp - logp_old)
        clip_adv = torch.clamp(ratio, 1 - self.clip_ratio, 1 + self.clip_ratio) * adv
        return -(torch.min(ratio * adv, clip_adv)).mean()

    def critic_loss(self, state, qval) -> torch.Tensor:
        value = self.critic(state)
        return (qval - value).pow(2).mean()

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor]):
        state, action, old_logp, qval, adv = batch

        # normalize advantages
        adv = (adv - adv.mean()) / adv.std()

        self.log("avg_ep_len", self.avg_ep_len, prog_bar=True, on_step=False, on_epoch=True)
        self.log("avg_ep_reward", self.avg_ep_reward, prog_bar=True, on_step=False, on_epoch=True)
        self.log("avg_reward", self.avg_reward, prog_bar=True, on_step=False, on_epoch=True)

        optimizer_actor, optimizer_critic = self.optimizers()

        for _ in range(self.nb_optim_iters):
            loss_actor = self.actor_loss(state, action, old_logp, adv)
            optimizer_actor.zero_grad()
            self.manual_backward(loss_actor)
            optimizer_actor.step()
            self.log("loss_actor", loss_actor, on_step=False, on_epoch=True, prog_bar=True, logger=True)

            loss_critic = self.critic_loss(state, qval)
            optimizer_critic.zero_grad()
            self.manual_backward(loss_critic)
            optimizer_critic.step()
            self.log("loss_critic", loss_critic, on_step=False, on_epoch=True, prog_bar=False, logger=True)

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        optimizer_actor = torch.optim.Adam(self.actor.parameters(), lr=self.lr_actor)
        optimizer_critic = torch.optim.Adam(self.critic.parameters(), lr=self.lr_critic)
        return optimizer_actor, optimizer_critic

    def _dataloader(self) -> DataLoader:
        dataset = ExperienceSourceDataset(self.generate_trajectory_samples)
        return DataLoader(dataset=dataset, batch_size=self.batch_size)

    def train_dataloader(self) -> DataLoader:
        return self._dataloader()


def main(root):
    seed_everything(0)
    model = PPOLightning(batch_size=16, steps_per_epoch=64, nb_optim_iters=2, max_episode_len=50)
    trainer = Trainer(accelerator="cpu", devices=1, max_epochs=2)
    trainer.fit(model)
    return model
