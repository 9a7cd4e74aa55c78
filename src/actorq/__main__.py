import hydra
@hydra.main(version_base="1.3", config_path="pkg://actorq.conf", config_name="config")
def main(cfg):
    print(cfg)
if __name__ == "__main__":
    main()
